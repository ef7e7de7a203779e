"""validator.provision with real ansible-runner and ansible-playbook, on localhost.

The hosts (tests/fixtures/provision/hosts.yml) use a local connection, except one that
nobody answers (ssh to 127.0.0.1 port 1); the playbook is a five-task stand-in for
site.yml. Each run starts ansible-playbook (1-3 s), so this file takes ~30 s.
"""

from __future__ import annotations

import re
import shutil
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from validator.errors import BadInputError, CouldNotRunError
from validator.provision import (
    BECOME_PROMPT,
    HostRecap,
    ProvisionEvent,
    ProvisionRequest,
    ProvisionResult,
    certify_transport,
    count_listed_tasks,
    default_playbook,
    default_state_dir,
    estimate_tasks,
    parse_extra_vars,
    recap,
    run_provision,
    to_event,
)

pytestmark = pytest.mark.skipif(
    shutil.which("ansible-playbook") is None, reason="ansible-playbook is not installed"
)
FIXTURES = Path(__file__).parent / "fixtures" / "provision"
HOSTS = FIXTURES / "hosts.yml"
SITE = FIXTURES / "site.yml"
TASKS = (
    "Write the marker file",
    "Probe the host",
    "Fail where the inventory asks for it",
    "Never needed",
    "Say done",
)
# Long enough for any healthy run here; a run stuck (e.g. at an unanswered prompt)
# is canceled rather than hanging the suite.
GUARD_S = 120.0


def _request(tmp: Path, **fields: object) -> ProvisionRequest:
    out = tmp / "out"
    out.mkdir(exist_ok=True)
    values: dict[str, object] = {
        "inventories": (str(HOSTS),),
        "playbook": str(SITE),
        "extra_vars": {"fixture_dir": str(out)},
        "state_dir": str(tmp / "state"),
    }
    values.update(fields)
    return ProvisionRequest(**values)  # type: ignore[arg-type]


def _run(request: ProvisionRequest) -> tuple[ProvisionResult, list[ProvisionEvent]]:
    events: list[ProvisionEvent] = []
    cancel = threading.Event()
    guard = threading.Timer(GUARD_S, cancel.set)
    guard.start()
    try:
        result = run_provision(request, on_event=events.append, cancel=cancel)
    finally:
        guard.cancel()
    assert result.status != "canceled", "the run hung until the guard canceled it"
    return result, events


def _host(result: ProvisionResult, name: str) -> HostRecap:
    found = [host for host in result.hosts if host.host == name]
    assert len(found) == 1, f"{name} not in the recap: {result.hosts}"
    return found[0]


@pytest.fixture(scope="module")
def full(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[ProvisionResult, list[ProvisionEvent], Path]:
    tmp = tmp_path_factory.mktemp("full")
    result, events = _run(_request(tmp))
    return result, events, tmp


# ------------------------------------------------------------ one run, all hosts


def test_recap_counts_each_host(full: tuple[ProvisionResult, list[ProvisionEvent], Path]) -> None:
    result, _, tmp = full
    assert [host.host for host in result.hosts] == ["node-a", "node-b", "node-broken", "node-dead"]
    assert _host(result, "node-a") == HostRecap(host="node-a", ok=3, changed=1, skipped=2)
    assert _host(result, "node-b") == HostRecap(host="node-b", ok=3, changed=1, skipped=2)
    broken = _host(result, "node-broken")
    assert (broken.ok, broken.changed, broken.failed, broken.unreachable) == (2, 1, 1, 0)
    dead = _host(result, "node-dead")
    assert (dead.ok, dead.failed, dead.unreachable) == (0, 0, 1)
    assert sorted(path.name for path in (tmp / "out").iterdir()) == [
        "node-a.txt",
        "node-b.txt",
        "node-broken.txt",
    ]


def test_failures_make_the_run_not_ok(
    full: tuple[ProvisionResult, list[ProvisionEvent], Path],
) -> None:
    result, _, _ = full
    assert result.status == "failed"
    assert result.rc != 0
    assert not result.ok
    assert result.error is None
    assert result.succeeded_hosts == ("node-a", "node-b")


def test_first_failure_message_per_host(
    full: tuple[ProvisionResult, list[ProvisionEvent], Path],
) -> None:
    result, _, _ = full
    assert set(result.failed_messages) == {"node-broken", "node-dead"}
    broken = result.failed_messages["node-broken"]
    assert broken.startswith("Fail where the inventory asks for it: ")
    assert "E: Unable to locate package nvidia-open-999" in broken
    dead = result.failed_messages["node-dead"]
    assert dead.startswith("Write the marker file: ")
    assert "port 1" in dead
    assert all("\n" not in message for message in result.failed_messages.values())


def test_events_reach_the_callback_in_order(
    full: tuple[ProvisionResult, list[ProvisionEvent], Path],
) -> None:
    _, events, _ = full
    mine = [(event.task, event.status) for event in events if event.host == "node-a"]
    assert mine == [
        (TASKS[0], "started"),
        (TASKS[0], "changed"),
        (TASKS[1], "started"),
        (TASKS[1], "ok"),
        (TASKS[2], "started"),
        (TASKS[2], "skipped"),
        (TASKS[3], "started"),
        (TASKS[3], "skipped"),
        (TASKS[4], "started"),
        (TASKS[4], "ok"),
    ]
    broken = [event for event in events if event.host == "node-broken" and event.final]
    assert [(event.task, event.status) for event in broken] == [
        (TASKS[0], "changed"),
        (TASKS[1], "ok"),
        (TASKS[2], "failed"),
    ]
    assert "nvidia-open-999" in broken[-1].message
    dead = [event for event in events if event.host == "node-dead" and event.final]
    assert [event.status for event in dead] == ["unreachable"]
    # Every result is one host x task: the progress bar's unit.
    assert sum(event.final for event in events) == 5 + 5 + 3 + 1


def test_artifacts_of_the_run_are_kept(
    full: tuple[ProvisionResult, list[ProvisionEvent], Path],
) -> None:
    result, _, tmp = full
    artifacts = Path(result.artifacts_dir)
    assert artifacts.parent == tmp / "state" / "runs"
    assert re.fullmatch(r"\d{8}T\d{6}Z-[0-9a-f]{8}", artifacts.name)
    assert (artifacts / "status").read_text() == "failed"
    assert len(list((artifacts / "job_events").glob("*.json"))) > 20
    assert "PLAY RECAP" in (artifacts / "stdout").read_text()


def test_result_as_json_data(full: tuple[ProvisionResult, list[ProvisionEvent], Path]) -> None:
    result, _, _ = full
    data = result.to_dict()
    assert data["ok"] is False
    assert data["status"] == "failed"
    rows = {row["host"]: row for row in data["hosts"]}
    assert rows["node-a"]["succeeded"] is True
    assert rows["node-a"]["changed"] == 1
    assert rows["node-dead"]["unreachable"] == 1
    assert "nvidia-open-999" in rows["node-broken"]["message"]


# ------------------------------------------------------------ options


def test_limit_to_good_hosts_succeeds(tmp_path: Path) -> None:
    result, _ = _run(_request(tmp_path, limit="node-a:node-b"))
    assert [host.host for host in result.hosts] == ["node-a", "node-b"]
    assert result.status == "successful"
    assert result.rc == 0
    assert result.ok
    assert result.failed_messages == {}


def test_check_mode_changes_nothing(tmp_path: Path) -> None:
    result, events = _run(_request(tmp_path, limit="node-a", check=True))
    assert result.ok
    assert result.check
    # The copy would change the file: reported, not done.
    assert _host(result, "node-a").changed == 1
    assert (TASKS[0], "changed") in [(event.task, event.status) for event in events]
    assert not (tmp_path / "out" / "node-a.txt").exists()


def test_tags_and_skip_tags_select_tasks(tmp_path: Path) -> None:
    result, events = _run(_request(tmp_path, limit="node-a", tags="probe"))
    assert [(event.task, event.status) for event in events if event.final] == [(TASKS[1], "ok")]
    assert _host(result, "node-a") == HostRecap(host="node-a", ok=1)
    assert not (tmp_path / "out" / "node-a.txt").exists()

    result, events = _run(_request(tmp_path, limit="node-a", skip_tags="files"))
    assert TASKS[0] not in {event.task for event in events}
    assert TASKS[4] in {event.task for event in events}
    assert result.ok


def test_mirror_sets_the_repository_variable(tmp_path: Path) -> None:
    playbook = tmp_path / "mirror.yml"
    playbook.write_text(
        "- name: Show the repository\n"
        "  hosts: all\n"
        "  gather_facts: false\n"
        "  tasks:\n"
        "    - name: Fail with the repository URL\n"
        "      ansible.builtin.fail:\n"
        "        msg: 'repo={{ cuda_repository_url }}'\n"
    )
    result, _ = _run(
        _request(
            tmp_path, limit="node-a", playbook=str(playbook), mirror="http://10.0.0.5:8080/cuda/"
        )
    )
    assert result.failed_messages["node-a"].endswith("repo=http://10.0.0.5:8080/cuda")


def test_become_password_is_answered_and_never_written(tmp_path: Path) -> None:
    password = f"become-{uuid.uuid4().hex}"
    canary = f"canary-{uuid.uuid4().hex}"
    request = _request(
        tmp_path,
        limit="node-a",
        become_password=password,
        extra_vars={"fixture_dir": str(tmp_path / "out"), "canary": canary},
    )
    assert password not in repr(request)
    result, _ = _run(request)
    assert result.ok  # the prompt was answered, or the run would hang
    stdout = (Path(result.artifacts_dir) / "stdout").read_text()
    assert "BECOME password" in stdout
    assert re.match(BECOME_PROMPT, "BECOME password: ")

    def holding(secret: str) -> list[Path]:
        state = tmp_path / "state"
        return [
            path
            for path in state.rglob("*")
            if path.is_file() and secret.encode() in path.read_bytes()
        ]

    # The search does find what the run writes down (the extra variables are on the
    # recorded command line), so finding no password means there is none.
    assert holding(canary)
    assert holding(password) == []
    assert not list((tmp_path / "state").rglob("passwords"))
    assert not (tmp_path / "state" / "runner" / "env").exists()


def test_old_runs_are_rotated(tmp_path: Path) -> None:
    kept: list[str] = []
    for _ in range(3):
        result, _ = _run(_request(tmp_path, limit="node-a", tags="probe", keep_runs=2))
        kept.append(Path(result.artifacts_dir).name)
        time.sleep(0.05)  # rotation goes by modification time
    runs = sorted(path.name for path in (tmp_path / "state" / "runs").iterdir())
    assert runs == sorted(kept[1:])


def test_cancel_stops_a_long_task(tmp_path: Path) -> None:
    playbook = tmp_path / "slow.yml"
    playbook.write_text(
        "- name: Slow\n"
        "  hosts: all\n"
        "  gather_facts: false\n"
        "  tasks:\n"
        "    - name: Sleep a while\n"
        "      ansible.builtin.command: sleep 60\n"
    )
    cancel = threading.Event()

    def on_event(event: ProvisionEvent) -> None:
        if event.status == "started":
            cancel.set()

    started = time.monotonic()
    result = run_provision(
        _request(tmp_path, limit="node-a", playbook=str(playbook)), on_event=on_event, cancel=cancel
    )
    assert result.status == "canceled"
    assert not result.ok
    assert time.monotonic() - started < 30


def test_a_broken_playbook_is_reported_on_one_line(tmp_path: Path) -> None:
    playbook = tmp_path / "broken.yml"
    playbook.write_text(
        "- name: Broken\n  hosts: all\n  tasks:\n    - name: X\n      nosuch.module: {}\n"
    )
    result, events = _run(_request(tmp_path, playbook=str(playbook)))
    assert result.hosts == ()
    assert not result.ok
    assert events == []
    assert result.error is not None
    assert "nosuch.module" in result.error
    assert "\n" not in result.error


def test_a_run_where_no_task_matches_is_not_ok(tmp_path: Path) -> None:
    result, _ = _run(_request(tmp_path, tags="no-such-tag"))
    assert result.status == "successful"
    assert result.hosts == ()
    assert not result.ok
    assert result.error is not None
    assert "no host ran" in result.error


# ------------------------------------------------------------ estimate


def test_estimate_is_hosts_times_tasks(tmp_path: Path) -> None:
    assert estimate_tasks(_request(tmp_path)) == 4 * len(TASKS)
    assert estimate_tasks(_request(tmp_path, limit="node-a:node-b")) == 2 * len(TASKS)
    assert estimate_tasks(_request(tmp_path, limit="node-a", tags="probe")) == 1


def test_estimate_is_none_when_ansible_cannot_list(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text("- name: Broken\n  hosts: all\n  tasks: [nonsense\n")
    assert estimate_tasks(_request(tmp_path, playbook=str(broken))) is None
    assert estimate_tasks(_request(tmp_path, playbook=str(tmp_path / "missing.yml"))) is None


def test_count_listed_tasks_sums_over_plays() -> None:
    listing = (
        "\nplaybook: site.yml\n\n"
        "  play #1 (gpu): Driver\tTAGS: []\n"
        "    pattern: ['gpu']\n"
        "    hosts (3):\n      a\n      b\n      c\n"
        "    tasks:\n"
        "      nvidia_driver : Install\tTAGS: [driver]\n"
        "      nvidia_driver : Hold\tTAGS: [driver]\n\n"
        "  play #2 (all): Verify\tTAGS: []\n"
        "    pattern: ['all']\n"
        "    hosts (4):\n      a\n      b\n      c\n      d\n"
        "    tasks:\n"
        "      gpu_verify : nvidia-smi answers\tTAGS: [verify]\n"
    )
    assert count_listed_tasks(listing) == 3 * 2 + 4 * 1
    assert count_listed_tasks("") == 0


# ------------------------------------------------------------ input errors


def test_missing_inventory_is_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nope.ini"
    with pytest.raises(BadInputError, match="inventory not found") as caught:
        run_provision(_request(tmp_path, inventories=(str(missing),)))
    assert str(missing) in str(caught.value)
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "state").exists()  # nothing started


def test_missing_playbook_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="playbook not found"):
        run_provision(_request(tmp_path, playbook=str(tmp_path / "site.yml")))


def test_limit_matching_nothing_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="no hosts matched"):
        run_provision(_request(tmp_path, limit="gpu-99"))


@pytest.mark.parametrize(
    ("mirror", "extra", "message"),
    [
        ("not a url", {}, "expected a URL"),
        ("http://a/cuda", {"cuda_repository_url": "http://b/cuda"}, "disagree"),
    ],
)
def test_bad_mirror(tmp_path: Path, mirror: str, extra: dict[str, str], message: str) -> None:
    with pytest.raises(BadInputError, match=message):
        run_provision(_request(tmp_path, mirror=mirror, extra_vars=extra))


def test_missing_ansible_runner_is_could_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ansible_runner", None)
    with pytest.raises(CouldNotRunError, match="ansible-runner cannot be imported"):
        run_provision(_request(tmp_path))


def test_missing_ansible_playbook_is_could_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    with pytest.raises(CouldNotRunError, match="ansible-playbook not found"):
        run_provision(_request(tmp_path))


# ------------------------------------------------------------ extra variables


def test_extra_vars_are_yaml_typed_but_versions_stay_text(tmp_path: Path) -> None:
    varfile = tmp_path / "vars.yml"
    varfile.write_text("from_file: 7\nlist_var: [a, b]\n")
    parsed = parse_extra_vars(
        [
            "flag=true",
            "count=3",
            "version=12.10",
            "driver=550.90.07",
            "empty=",
            "items=[1, 2]",
            "text=hello world",
            f"@{varfile}",
            "count=4",  # later wins, as with ansible-playbook
        ]
    )
    assert parsed == {
        "flag": True,
        "count": 4,
        "version": "12.10",
        "driver": "550.90.07",
        "empty": "",
        "items": [1, 2],
        "text": "hello world",
        "from_file": 7,
        "list_var": ["a", "b"],
    }


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("novalue", "expected KEY=VALUE"),
        ("1abc=2", "not a variable name"),
        ("has space=2", "not a variable name"),
        ("x=[unclosed", "not valid YAML"),
        ("@/nonexistent/vars.yml", "cannot read"),
    ],
)
def test_bad_extra_vars_are_one_line(item: str, message: str) -> None:
    with pytest.raises(BadInputError, match=re.escape(message)) as caught:
        parse_extra_vars([item])
    assert "\n" not in str(caught.value)
    assert item in str(caught.value)


def test_extra_vars_file_must_be_a_mapping(tmp_path: Path) -> None:
    varfile = tmp_path / "vars.yml"
    varfile.write_text("- a\n- b\n")
    with pytest.raises(BadInputError, match="must hold a mapping"):
        parse_extra_vars([f"@{varfile}"])


# ------------------------------------------------------------ events and recap


def test_to_event_reads_runner_events() -> None:
    changed = to_event(
        {"event": "runner_on_ok", "event_data": {"host": "h", "task": "T", "res": {"changed": 1}}}
    )
    assert changed == ProvisionEvent(host="h", task="T", status="changed")
    ignored = to_event(
        {
            "event": "runner_on_failed",
            "event_data": {
                "host": "h",
                "task": "T",
                "ignore_errors": True,
                "res": {"results": [{"failed": False}, {"failed": True, "msg": "item two broke"}]},
            },
        }
    )
    assert ignored == ProvisionEvent(
        host="h", task="T", status="failed", message="item two broke", ignored=True
    )
    assert to_event({"event": "playbook_on_task_start", "event_data": {"task": "T"}}) is None
    assert to_event({"event": "runner_on_ok", "event_data": {"task": "T"}}) is None


def test_recap_reads_the_stats_event() -> None:
    stats = {
        "ok": {"b": 2, "a": 5},
        "changed": {"a": 1},
        "failures": {"b": 1},
        "dark": {"c": 1},
        "skipped": {},
        "rescued": {"a": 1},
        "ignored": {"b": 2},
        "processed": {"a": 1, "b": 1, "c": 1},
    }
    assert recap(stats) == (
        HostRecap(host="a", ok=5, changed=1, rescued=1),
        HostRecap(host="b", ok=2, failed=1, ignored=2),
        HostRecap(host="c", unreachable=1),
    )
    assert recap(None) == ()


# ------------------------------------------------------------ locations and transport


def test_default_state_dir_follows_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert default_state_dir() == tmp_path / "xdg" / "gpuready"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_state_dir() == tmp_path / "home" / ".local" / "state" / "gpuready"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert default_state_dir() == tmp_path / "home" / ".local" / "state" / "gpuready"


def test_default_playbook_is_site_yml_beside_the_package() -> None:
    playbook = default_playbook()
    assert playbook.name == "site.yml"
    assert playbook.parent.name == "playbooks"


def test_certify_transport(tmp_path: Path) -> None:
    assert certify_transport([str(HOSTS)], ["node-a", "node-b"]) == "local"
    assert certify_transport([str(HOSTS)], ["node-a", "node-dead"]) == "ssh"
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(
        "g1 ansible_connection=local gpuready_transport=ansible\n"
        "g2 ansible_host=10.0.0.2 gpuready_transport=ansible\n"
        "g3 ansible_host=10.0.0.3\n"
    )
    assert certify_transport([str(inventory)], ["g1", "g2"]) == "ansible"
    assert certify_transport([str(inventory)], ["g1", "g3"]) == "ssh"
