"""``gpuready provision`` end to end through the CLI, on localhost fixture hosts.

Same hosts and playbook as tests/service/test_provision_runner.py; --certify certifies the
local hosts through the local transport with their simulated GPUs. ~25 s.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import shutil
import sqlite3
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from validator.cli.main import cli, main
from validator.cli.provision import ProvisionProgress, closing_table, provision, provision_exit_code
from validator.service.provision_service import HostRecap, ProvisionEvent, ProvisionResult
from validator.store import Store

pytestmark = pytest.mark.skipif(
    shutil.which("ansible-playbook") is None, reason="ansible-playbook is not installed"
)
FIXTURES = Path(__file__).parent.parent / "fixtures" / "provision"
HOSTS = FIXTURES / "hosts.yml"
SITE = FIXTURES / "site.yml"


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # The lead registers the command in main.py; until then (and regardless) the tests
    # put it in the group themselves, and take it out again afterwards.
    monkeypatch.setitem(cli.commands, "provision", provision)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("COLUMNS", "250")  # table rows on one line each
    (tmp_path / "out").mkdir()
    return tmp_path / "xdg" / "gpuready"


def _argv(tmp_path: Path, *args: str) -> list[str]:
    return [
        "provision",
        "-i",
        str(HOSTS),
        "--playbook",
        str(SITE),
        "-e",
        f"fixture_dir={tmp_path / 'out'}",
        "--no-color",
        *args,
    ]


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def table_rows(text: str) -> dict[str, list[str]]:
    """The closing table's rows by host: the cells of each line drawn with │."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith("│"):
            cells = [cell.strip() for cell in line.strip("│").split("│")]
            if cells[0]:
                rows[cells[0]] = cells[1:]
    return rows


def test_every_host_succeeding_exits_0(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, _argv(tmp_path, "--limit", "node-a:node-b"))
    assert code == 0, err
    rows = table_rows(out)
    assert rows == {
        "node-a": ["3", "1", "0", "0", ""],
        "node-b": ["3", "1", "0", "0", ""],
    }
    assert "provision successful" in err
    assert f"artifacts: {state / 'runs'}" in err


def test_a_failed_or_unreachable_host_exits_1_with_the_table(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, _argv(tmp_path))
    assert code == 1
    rows = table_rows(out)
    assert rows["node-a"] == ["3", "1", "0", "0", ""]
    assert rows["node-broken"][:4] == ["2", "1", "1", "0"]
    assert "E: Unable to locate package nvidia-open-999" in rows["node-broken"][4]
    assert rows["node-dead"][:4] == ["0", "0", "0", "1"]
    assert "port 1" in rows["node-dead"][4]
    # Not a terminal: one plain line per host result, counted against the estimate.
    assert re.search(r"^\[\d+/20\] node-broken failed  Fail where", err, re.MULTILINE)
    assert len(re.findall(r"^\[\d+/20\] ", err, re.MULTILINE)) == 14
    assert "Traceback" not in err


def test_json_output(tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, _argv(tmp_path, "--json"))
    assert code == 1
    document = json.loads(out)
    assert set(document) == {
        "status",
        "rc",
        "ok",
        "check",
        "error",
        "artifacts_dir",
        "hosts",
        "failed_messages",
        "waves",
        "stopped",
        "not_run",
        "slurm",
    }
    assert document["ok"] is False
    assert document["status"] == "failed"
    hosts = {row["host"]: row for row in document["hosts"]}
    assert set(hosts) == {"node-a", "node-b", "node-broken", "node-dead"}
    assert hosts["node-b"] == {
        "host": "node-b",
        "ok": 3,
        "changed": 1,
        "failed": 0,
        "unreachable": 0,
        "skipped": 2,
        "rescued": 0,
        "ignored": 0,
        "succeeded": True,
        "message": "",
    }
    assert set(document["failed_messages"]) == {"node-broken", "node-dead"}
    assert Path(document["artifacts_dir"]).parent == state / "runs"
    # The table still shows, on stderr, leaving stdout to the JSON.
    assert "node-broken" in table_rows(err)


def test_check_mode_writes_nothing(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, _argv(tmp_path, "--limit", "node-a", "--check"))
    assert code == 0
    assert "check mode" in out
    assert table_rows(out)["node-a"][:2] == ["3", "1"]
    assert list((tmp_path / "out").iterdir()) == []


def test_check_diff_shows_each_hosts_changes_and_changes_nothing(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "out" / "node-b.txt").write_text("old line\n")
    code, out, err = run(capsys, _argv(tmp_path, "--limit", "node-a:node-b", "--check", "--diff"))
    assert code == 0, err
    lines = out.splitlines()
    a, b = lines.index("node-a: would make 1 change"), lines.index("node-b: would make 1 change")
    title = next(n for n, line in enumerate(lines) if "check mode: nothing changed" in line)
    assert a < b < title
    assert lines[a + 1 : a + 3] == ["  Write the marker file", "    --- before"]
    # Its header is Ansible's: the destination (ansible-core 2.19) or the source's temporary file.
    assert lines[a + 3].startswith("    +++ after: /")
    assert lines[a + 4 : a + 6] == ["    @@ -0,0 +1 @@", "    +provisioned node-a"]
    assert lines[b + 5 : b + 7] == ["    -old line", "    +provisioned node-b"]
    assert "\x1b" not in out  # --no-color
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["node-b.txt"]
    assert (tmp_path / "out" / "node-b.txt").read_text() == "old line\n"


@pytest.mark.parametrize(
    "args",
    [
        ("--burn", "1s"),
        ("--report-dir", "reports"),
        ("--policy", "policy.yaml"),
        ("--sign-key", "key"),
        ("--dcgm-level", "1"),
        ("--no-interconnect",),
        ("--burn-dtype", "fp32"),
    ],
)
def test_certifys_options_need_certify(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    code, out, err = run(capsys, [*_argv(tmp_path), *args])
    assert code == 2
    assert out == ""
    assert err.strip().splitlines() == [
        f"gpuready: error: {args[0]} needs --certify (see 'gpuready provision --help')"
    ]
    assert not (state / "runs").exists()


def test_a_bad_certify_input_is_refused_before_provisioning(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("xid_window_hours: [1\n")
    code, _, err = run(capsys, [*_argv(tmp_path), "--certify", "--policy", str(policy)])
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert str(policy) in err
    assert not (state / "runs").exists()  # nothing provisioned first


def test_certify_burns_5_minutes_and_takes_certifys_options(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from validator.service import certify_service

    asked: list[certify_service.CertifyRequest] = []
    shown: list[float] = []
    real = certify_service.run_certify

    def certify_without_the_burn(
        request: certify_service.CertifyRequest, store: Store, **kwargs: object
    ) -> certify_service.CertifyOutcome:
        asked.append(request)  # the request as provision made it; then a quick real run
        display = kwargs["fleet_display"]
        shown.append(display.burn_s)  # type: ignore[attr-defined]  # the live view's time left
        return real(dataclasses.replace(request, burn=None), store, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(certify_service, "run_certify", certify_without_the_burn)
    policy = tmp_path / "policy.yaml"
    policy.write_text("xid_window_hours: 48\n")
    key = Path(__file__).parent.parent / "fixtures" / "keys" / "signer"
    reports = tmp_path / "reports"
    argv = _argv(tmp_path, "--limit", "node-a", "--certify", "--policy", str(policy))
    argv += ["--report-dir", str(reports), "--sign-key", str(key), "--dcgm-level", "0"]
    code, out, err = run(capsys, argv)
    assert len(asked) == 1, err
    request = asked[0]
    assert request.burn is not None
    assert request.burn.duration_s == 300.0  # certify's default, 5 minutes
    assert shown == [300.0]  # the live view counts each host's burn down, as certify's does
    assert (request.policy_path, request.report_dir) == (str(policy), str(reports))
    assert (request.sign_key, request.dcgm_level) == (str(key), 0)
    assert request.reach.limit == "node-a"
    assert (reports / "report.json").is_file()
    assert f"reports: {reports}" in err
    assert code == 1  # the burn left out: not certified
    assert "0 certified, 1 not certified" in out


def test_nothing_to_run_exits_3(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, _argv(tmp_path, "--tags", "no-such-tag"))
    assert code == 3
    assert "gpuready: provision: no host ran any task" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("-i", "/nonexistent/hosts.ini"), "/nonexistent/hosts.ini: inventory not found"),
        (("-e", "nvidia_driver_branch"), "expected KEY=VALUE"),
        (("-e", "9lives=1"), "not a variable name"),
        (("--limit", "gpu-99"), "no hosts matched --limit"),
        (("--mirror", "mirror.local/cuda"), "expected a URL"),
        (("--playbook", "/nonexistent/site.yml"), "playbook not found"),
        (("--batch", "0"), "--batch '0': expected a host count (e.g. 4) or a percentage"),
        (("--batch", "150%"), "from 1% to 100% (e.g. 25%)"),
        (("--max-fail-percentage", "120"), "--max-fail-percentage '120': expected a whole"),
        (("--batch", "2", "-e", "provision_serial=3"), "--batch and -e provision_serial disagree"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path,
    state: Path,
    capsys: pytest.CaptureFixture[str],
    args: tuple[str, ...],
    message: str,
) -> None:
    code, out, err = run(capsys, [*_argv(tmp_path), *args])
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("gpuready: error: ")
    assert message in lines[0]
    assert not (state / "runs").exists()  # refused before anything ran


def test_batch_rolls_through_the_hosts(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The fixture playbook has no serial of its own: this one takes site.yml's.
    playbook = tmp_path / "rolling.yml"
    playbook.write_text(
        SITE.read_text().replace(
            "  gather_facts: false\n",
            '  gather_facts: false\n  serial: "{{ provision_serial | default(0) }}"\n'
            '  max_fail_percentage: "{{ provision_max_fail_percentage | default(100) }}"\n',
        )
    )
    argv = _argv(tmp_path, "--limit", "node-a:node-b:node-broken", "--batch", "1", "--json")
    argv[argv.index(str(SITE))] = str(playbook)
    code, out, err = run(capsys, argv)
    assert code == 1
    document = json.loads(out)
    assert document["waves"] == [["node-a"], ["node-b"], ["node-broken"]]
    assert "provision failed in 3 batches" in err
    # Over all four hosts the roll stops at node-broken, before node-dead's batch.
    argv = _argv(tmp_path, "--batch", "1")
    argv[argv.index(str(SITE))] = str(playbook)
    code, out, _ = run(capsys, argv)
    assert code == 1
    rows = table_rows(out)
    assert rows["node-broken"][2] == "1"  # failed
    why = "not run: the roll stopped before this host's batch"
    assert rows["node-dead"] == ["", "", "", "", why]


def test_burn_needs_certify(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, [*_argv(tmp_path), "--burn", "1s"])
    assert code == 2
    assert "--burn needs --certify" in err


def test_certify_covers_only_the_hosts_that_provisioned(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, _argv(tmp_path, "--certify", "--burn", "0", "--json"))
    document = json.loads(out)
    names = sorted(node["hostname"] for node in document["certify"]["nodes"])
    assert names == ["node-a", "node-b"]
    assert "through the local transport" in err
    # Provisioning failed on two hosts (1); without a burn-in nothing is certified (1).
    assert code == 1


def test_certify_exit_code_is_the_worse_of_both(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _argv(tmp_path, "--limit", "node-a:node-b", "--certify", "--burn", "0")
    code, out, _ = run(capsys, argv)
    assert code == 1  # provisioning was fine; certification without a burn-in is not
    assert "Overall: NOT_CERTIFIED" in out
    assert table_rows(out)["node-a"][:4] == ["3", "1", "0", "0"]

    argv = _argv(tmp_path, "--limit", "node-a:node-b", "--certify", "--burn", "1s")
    code, out, _ = run(capsys, argv)
    assert code == 0, out
    assert "Overall: CERTIFIED" in out
    assert table_rows(out)["node-a"][:4] == ["3", "0", "0", "0"]  # the second run changed nothing


def test_ask_become_pass_prompts_without_echo(
    tmp_path: Path, state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    password = f"pw-{uuid.uuid4().hex}"
    result = CliRunner().invoke(
        cli,
        [*_argv(tmp_path, "--limit", "node-a"), "--ask-become-pass"],
        input=password + "\n",
    )
    assert result.exit_code == 0, result.output
    assert "BECOME password" in result.output
    assert password not in result.output
    written = [
        path
        for path in state.rglob("*")
        if path.is_file() and password.encode() in path.read_bytes()
    ]
    assert written == []
    stdout = next((state / "runs").iterdir()) / "stdout"
    assert "BECOME password" in stdout.read_text()  # ansible-playbook did ask, and was answered


def test_bad_input_is_refused_before_the_password_prompt(tmp_path: Path, state: Path) -> None:
    result = CliRunner().invoke(
        cli,
        ["provision", "-i", "/nonexistent/hosts.ini", "--ask-become-pass"],
        input="secret\n",
    )
    assert result.exit_code != 0
    assert "BECOME password" not in result.output


# ------------------------------------------------------------ rendering


def _result(**fields: object) -> ProvisionResult:
    values: dict[str, object] = {
        "status": "failed",
        "rc": 2,
        "hosts": (HostRecap(host="gpu-01", ok=10, changed=4), HostRecap(host="gpu-02", failed=1)),
        "artifacts_dir": "/tmp/runs/x",
        "failed_messages": {"gpu-02": "Install the driver: no package nvidia-open"},
    }
    values.update(fields)
    return ProvisionResult(**values)  # type: ignore[arg-type]


def test_closing_table_contents() -> None:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(closing_table(_result()))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    rows = table_rows(text)
    assert rows["gpu-01"] == ["10", "4", "0", "0", ""]
    assert rows["gpu-02"] == ["0", "0", "1", "0", "Install the driver: no package nvidia-open"]


def test_exit_codes() -> None:
    assert provision_exit_code(_result()) == 1
    ok = _result(status="successful", rc=0, hosts=(HostRecap(host="gpu-01", ok=3),))
    assert provision_exit_code(ok) == 0
    assert provision_exit_code(_result(hosts=(), error="ERROR! syntax")) == 3
    canceled = _result(status="canceled", rc=254, hosts=(HostRecap(host="gpu-01", ok=3),))
    assert provision_exit_code(canceled) == 3


def test_terminal_progress_shows_each_hosts_task() -> None:
    console = Console(file=io.StringIO(), force_terminal=True, width=160, color_system=None)
    progress = ProvisionProgress(2, console)
    progress.event(ProvisionEvent(host="gpu-01", task="Install the driver", status="started"))
    progress.event(ProvisionEvent(host="gpu-02", task="Add the repository", status="started"))
    progress.event(
        ProvisionEvent(host="gpu-02", task="Add the repository", status="failed", message="404")
    )
    for _ in range(2):
        progress.event(ProvisionEvent(host="gpu-01", task="Install the driver", status="ok"))
    assert progress.total == 3  # the estimate grows rather than overflowing
    probe = Console(file=io.StringIO(), width=160, color_system=None)
    probe.print(progress._render())
    text = probe.file.getvalue()  # type: ignore[attr-defined]
    assert re.search(r"gpu-01\s+Install the driver", text)
    assert re.search(r"gpu-02\s+failed\s+Add the repository", text)
    assert "3/3" in text
    # Live was not entered: nothing drawn, and no plain lines either.
    assert console.file.getvalue() == ""  # type: ignore[attr-defined]


def test_provision_certify_records_history_and_a_baseline_for_drift(
    tmp_path: Path, state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _argv(tmp_path, "--limit", "node-a:node-b", "--certify", "--burn", "1s")
    code, out, _ = run(capsys, argv)
    assert code == 0, out
    with sqlite3.connect(state / "history.db") as db:
        runs = db.execute("SELECT kind, policy_digest, argv FROM runs").fetchall()
    assert len(runs) == 1
    kind, digest, recorded = runs[0]
    assert kind == "certify"
    assert len(digest) == 64  # the policy the hosts were judged against
    assert "--certify" in json.loads(recorded)
    with Store.open(state / "history.db", readonly=True) as store:
        assert {r.hostname for r in store.history()} == {"node-a", "node-b"}
        for host in ("node-a", "node-b"):
            certificate = store.latest_certificate(host)
            assert certificate is not None, host
            assert certificate.hostname == host
    # drift now has its baseline: nothing drifted, nobody is "never certified"
    code, out, err = run(
        capsys, ["drift", "-i", str(HOSTS), "--limit", "node-a:node-b", "--transport", "local"]
    )
    assert code == 0, out + err
    assert re.search(r"^node-a\s+NO DRIFT", out, re.MULTILINE), out
    assert re.search(r"^node-b\s+NO DRIFT", out, re.MULTILINE), out


def test_a_bundled_playbook_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from validator.cli.provision import bundled_playbook

    drift_timer = Path(str(bundled_playbook("drift-timer")))
    assert drift_timer.name == "drift-timer.yml"
    assert drift_timer.is_file()
    assert Path(str(bundled_playbook("site"))).read_text().startswith("---")
    for given in (None, "no-such-playbook", "mine.yml", "plays/drift-timer"):
        assert bundled_playbook(given) == given
    monkeypatch.chdir(tmp_path)
    (tmp_path / "drift-timer").write_text("- hosts: all\n")  # the operator's own file wins
    assert bundled_playbook("drift-timer") == "drift-timer"


def test_json_carries_the_changes_of_a_diff_run(capsys: pytest.CaptureFixture[str]) -> None:
    from validator.cli.provision import _render
    from validator.service.provision_diff import DiffLine, RunChanges, TaskChange

    result = ProvisionResult(
        status="successful", rc=0, hosts=(HostRecap("gpu-01", ok=2, changed=1),),
        artifacts_dir="/tmp/run", check=True,
    )  # fmt: skip
    change = TaskChange("gpu-01", "Write the profile", "", (DiffLine("add", "+PATH=/x"),))
    _render(result, None, RunChanges((change,)), as_json=True, color=False)
    document = json.loads(capsys.readouterr().out)
    assert document["changes"] == [
        {"host": "gpu-01", "task": "Write the profile", "item": "", "lines": ["+PATH=/x"]}
    ]
    _render(result, None, None, as_json=True, color=False)
    assert "changes" not in json.loads(capsys.readouterr().out)  # no --diff, no key
