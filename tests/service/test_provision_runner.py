"""validator.service.provision_service with real ansible-runner and ansible-playbook, on localhost.

The hosts (tests/fixtures/provision/hosts.yml) use a local connection, except one that
nobody answers (ssh to 127.0.0.1 port 1); the playbook is a five-task stand-in for
site.yml. Each run starts ansible-playbook (1-3 s), so this file takes ~30 s.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from validator.error_tree import BadInputError, CouldNotRunError
from validator.service.provision_service import (
    BECOME_PROMPT,
    Batch,
    HostRecap,
    ProvisionEvent,
    ProvisionRequest,
    ProvisionResult,
    _extravars,
    certify_transport,
    check_request,
    count_listed_tasks,
    default_playbook,
    default_state_dir,
    estimate_tasks,
    forks_for,
    parse_batch,
    parse_extra_vars,
    parse_percentage,
    recap,
    run_provision,
    to_event,
)

pytestmark = pytest.mark.skipif(
    shutil.which("ansible-playbook") is None, reason="ansible-playbook is not installed"
)
FIXTURES = Path(__file__).parent.parent / "fixtures" / "provision"
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
    named = item if item.startswith("@") else item.partition("=")[0] if "=" in item else ""
    assert named in str(caught.value)


def test_a_bad_extra_var_never_shows_its_value() -> None:
    # The value may be a secret: the key and the problem name it, the value stays out.
    with pytest.raises(BadInputError) as caught:
        parse_extra_vars(["cfg={ansible_become_password: hunter2, x: [}"])
    assert "cfg" in str(caught.value)
    assert "not valid YAML" in str(caught.value)
    assert "hunter2" not in str(caught.value)


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


# ------------------------------------------------------------ rolling provisioning

SITE_PLAY = Path(__file__).resolve().parent.parent.parent / "playbooks" / "site.yml"
LIBRARY = SITE_PLAY.parent / "library"
ROLL_TASKS = ("Write the marker file", "Fail where the inventory asks for it", "Say done")


def _rolling_project(tmp: Path, hosts: dict[str, dict[str, object]]) -> tuple[Path, Path]:
    """An inventory of local hosts, and site.yml's play with tiny tasks for its roles.

    The play keeps site.yml's own header (serial, max_fail_percentage, force_handlers)
    and its pre_tasks/post_tasks (the Slurm drain and resume), so these tests run the
    real ones; only roles and tasks are replaced, and facts are not gathered.
    """
    import yaml

    (site,) = yaml.safe_load(SITE_PLAY.read_text())
    play = {key: value for key, value in site.items() if key not in ("roles", "tasks")}
    play.update(become=False, gather_facts=False)
    play["tasks"] = [
        {
            "name": ROLL_TASKS[0],
            "ansible.builtin.copy": {
                "content": "provisioned {{ inventory_hostname }}\n",
                "dest": "{{ fixture_dir }}/{{ inventory_hostname }}.txt",
                "mode": "0644",
            },
        },
        {
            "name": ROLL_TASKS[1],
            "ansible.builtin.command": "sh -c 'echo {{ fixture_fail_reason }} >&2; exit 3'",
            "changed_when": False,
            "when": "fixture_fail_reason is defined",
        },
        {"name": ROLL_TASKS[2], "ansible.builtin.debug": {"msg": "done"}},
    ]
    project = tmp / "project"
    project.mkdir()
    (project / "library").symlink_to(LIBRARY)  # beside the playbook, as for site.yml
    (project / "lookup_plugins").symlink_to(LIBRARY.parent / "lookup_plugins")
    playbook = project / "site.yml"
    playbook.write_text(yaml.safe_dump([play], sort_keys=False))
    inventory = tmp / "hosts.yml"
    document = {
        "all": {
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                # The converged probe's state stays in the test's folder.
                "provision_state_file": str(tmp / "provisioned-{{ inventory_hostname }}.json"),
            },
            "hosts": hosts,
        }
    }
    inventory.write_text(yaml.safe_dump(document))
    return playbook, inventory


def _roll(
    tmp: Path, hosts: dict[str, dict[str, object]], **fields: object
) -> tuple[ProvisionResult, list[ProvisionEvent]]:
    playbook, inventory = _rolling_project(tmp, hosts)
    return _run(_request(tmp, inventories=(str(inventory),), playbook=str(playbook), **fields))


FOUR = {name: {} for name in ("h1", "h2", "h3", "h4")}
BROKEN_H2: dict[str, dict[str, object]] = {
    **FOUR,
    "h2": {"fixture_fail_reason": "E: Unable to locate package nvidia-open-999"},
}


def _first_and_last(events: list[ProvisionEvent], host: str) -> tuple[int, int]:
    seen = [i for i, event in enumerate(events) if event.host == host]
    return seen[0], seen[-1]


def test_a_batch_of_2_over_4_hosts_runs_in_two_waves(tmp_path: Path) -> None:
    result, events = _roll(tmp_path, FOUR, batch=parse_batch("2"))
    assert result.ok, result
    assert result.waves == (("h1", "h2"), ("h3", "h4"))
    # Ansible really templated serial from the extra variable: nothing of the second
    # wave started before the first wave's last result.
    first_wave_end = max(_first_and_last(events, host)[1] for host in ("h1", "h2"))
    second_wave_start = min(_first_and_last(events, host)[0] for host in ("h3", "h4"))
    assert first_wave_end < second_wave_start
    assert result.stopped == ()
    assert result.not_run == ()


def test_without_a_batch_every_host_runs_in_one_wave(tmp_path: Path) -> None:
    result, _ = _roll(tmp_path, FOUR)
    assert result.ok
    assert result.waves == (("h1", "h2", "h3", "h4"),)


def test_a_percentage_batch_is_a_share_of_the_hosts(tmp_path: Path) -> None:
    result, _ = _roll(tmp_path, FOUR, batch=parse_batch("25%"))
    assert result.waves == (("h1",), ("h2",), ("h3",), ("h4",))


def test_a_failed_host_stops_the_roll_before_the_next_batch(tmp_path: Path) -> None:
    result, _ = _roll(tmp_path, BROKEN_H2, batch=parse_batch("2"))
    assert not result.ok
    assert result.waves == (("h1", "h2"),)
    # h1 failed nothing itself, yet was stopped midway: not a success, not certified.
    assert result.stopped == ("h1",)
    assert result.succeeded_hosts == ()
    assert result.failed_messages["h1"].startswith("stopped: its batch spent the failure budget")
    assert "nvidia-open-999" in result.failed_messages["h2"]
    assert result.not_run == ("h3", "h4")
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["h1.txt", "h2.txt"]
    data = result.to_dict()
    assert (data["stopped"], data["not_run"]) == (["h1"], ["h3", "h4"])


def test_a_failure_budget_lets_the_roll_go_on(tmp_path: Path) -> None:
    result, _ = _roll(tmp_path, BROKEN_H2, batch=parse_batch("2"), max_fail_percentage=50)
    assert result.waves == (("h1", "h2"), ("h3", "h4"))
    assert result.succeeded_hosts == ("h1", "h3", "h4")
    assert result.stopped == ()
    assert result.not_run == ()


def test_without_a_batch_a_failed_host_stops_no_other(tmp_path: Path) -> None:
    result, _ = _roll(tmp_path, BROKEN_H2)
    assert result.succeeded_hosts == ("h1", "h3", "h4")
    assert result.stopped == ()


def test_forks_cover_a_whole_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANSIBLE_FORKS", raising=False)
    request = _request(tmp_path)
    assert forks_for(request, 40) is None  # not batched: ansible-playbook's own
    assert forks_for(replace(request, batch=parse_batch("2")), 40) == 5  # never below it
    assert forks_for(replace(request, batch=parse_batch("8")), 40) == 8
    assert forks_for(replace(request, batch=parse_batch("25%")), 40) == 10
    assert forks_for(replace(request, batch=parse_batch("1%")), 40) == 5  # 0.4 host: 1


def test_forks_reach_ansible_playbook(tmp_path: Path) -> None:
    result, _ = _roll(tmp_path, {f"h{i}": {} for i in range(1, 8)}, batch=parse_batch("7"))
    command = (Path(result.artifacts_dir) / "command").read_text()
    assert '"--forks", "7"' in command or "'--forks', '7'" in command or "--forks 7" in command
    assert result.waves == (tuple(f"h{i}" for i in range(1, 8)),)


@pytest.mark.parametrize(
    ("text", "batch"),
    [("4", Batch(4)), ("25%", Batch(25, percent=True)), (" 100% ", Batch(100, percent=True))],
)
def test_parse_batch(text: str, batch: Batch) -> None:
    assert parse_batch(text) == batch
    assert parse_batch(str(batch)) == batch


@pytest.mark.parametrize("text", ["0", "0%", "101%", "-2", "2.5", "two", "", "%"])
def test_bad_batch_is_one_line_with_the_fix(text: str) -> None:
    with pytest.raises(BadInputError) as caught:
        parse_batch(text)
    message = str(caught.value)
    assert message.startswith(f"--batch {text!r}: expected a host count")
    assert "25%" in message
    assert "\n" not in message


@pytest.mark.parametrize("text", ["101", "-1", "ten", "1.5"])
def test_bad_failure_budget_is_one_line_with_the_fix(text: str) -> None:
    with pytest.raises(BadInputError, match=r"^--max-fail-percentage .*from 0 to 100"):
        parse_percentage(text)
    assert parse_percentage("0") == 0
    assert parse_percentage("30%") == 30


def test_rolling_settings_become_the_plays_variables(tmp_path: Path) -> None:
    request = _request(tmp_path, batch=parse_batch("25%"), slurm_drain=True)
    assert request.effective_max_fail_percentage == 0  # batching: the first failure stops
    variables = _extravars(request)
    assert variables["provision_serial"] == "25%"
    assert variables["provision_max_fail_percentage"] == 0
    assert variables["provision_slurm_drain"] is True
    plain = _extravars(_request(tmp_path))
    assert not {"provision_serial", "provision_max_fail_percentage"} & set(plain)
    assert (
        _extravars(_request(tmp_path, max_fail_percentage=20))["provision_max_fail_percentage"]
        == 20
    )


def test_rolling_settings_and_extra_vars_must_agree(tmp_path: Path) -> None:
    extra = {"fixture_dir": str(tmp_path), "provision_serial": 3}
    with pytest.raises(BadInputError, match="--batch and -e provision_serial disagree"):
        check_request(_request(tmp_path, batch=parse_batch("2"), extra_vars=extra))
    with pytest.raises(BadInputError, match="--max-fail-percentage 101: expected"):
        check_request(_request(tmp_path, max_fail_percentage=101))
    with pytest.raises(BadInputError, match="--batch '0'"):
        check_request(_request(tmp_path, batch=Batch(0)))


# ------------------------------------------------------------ Slurm drain/resume per batch


def fake_scontrol(bin_dir: Path, nodes: dict[str, dict[str, str | None]]) -> Path:
    """A scontrol on PATH that keeps node state in a JSON file and logs each call.

    ``nodes`` maps a node name to ``{"state": ..., "reason": ...}``; the file it returns
    holds ``{"nodes": {...}, "calls": [[args], ...]}`` as the fake left it.
    """
    import json

    state = bin_dir / "slurm.json"
    state.write_text(json.dumps({"nodes": nodes, "calls": []}))
    script = bin_dir / "scontrol"
    script.write_text(
        f"#!{sys.executable}\n"
        "import fcntl, json, sys\n"
        f"path = {str(state)!r}\n"
        # The batch's hosts call it at once: one at a time, as slurmctld would.
        "lock = open(path + '.lock', 'w')\n"
        "fcntl.flock(lock, fcntl.LOCK_EX)\n"
        "data = json.load(open(path))\n"
        "args = sys.argv[1:]\n"
        "data['calls'].append(args)\n"
        "nodes = data['nodes']\n"
        "if args[:2] == ['show', 'node']:\n"
        "    node = nodes.get(args[2])\n"
        "    if node is None:\n"
        "        print('Node ' + args[2] + ' not found', file=sys.stderr); code = 1\n"
        "    else:\n"
        "        print('NodeName=' + args[2] + ' Arch=x86_64 CoresPerSocket=32')\n"
        "        print('   State=' + node['state'] + ' ThreadsPerCore=2')\n"
        "        print('   Reason=' + (node['reason'] + ' [root@2024-06-01T10:00:00]'\n"
        "                           if node['reason'] else '(null)'))\n"
        "        code = 0\n"
        "elif args[:1] == ['update']:\n"
        "    fields = dict(arg.split('=', 1) for arg in args[1:])\n"
        "    node = nodes[fields['NodeName']]\n"
        "    if fields['State'] == 'DRAIN':\n"
        "        node['state'] = node['state'].split('+')[0] + '+DRAIN'\n"
        "        node['reason'] = fields['Reason']\n"
        "    else:\n"
        "        node['state'] = node['state'].split('+')[0]\n"
        "        node['reason'] = None\n"
        "    code = 0\n"
        "else:\n"
        "    code = 2\n"
        "with open(path, 'w') as out:\n"
        "    json.dump(data, out)\n"  # written before the lock goes at exit
        "sys.exit(code)\n"
    )
    script.chmod(0o755)
    return state


def _slurm(state: Path) -> dict[str, Any]:
    import json

    loaded: dict[str, Any] = json.loads(state.read_text())
    return loaded


def _updates(calls: list[list[str]], node: str) -> list[int]:
    return [i for i, call in enumerate(calls) if call[:2] == ["update", f"NodeName={node}"]]


@pytest.fixture
def scontrol_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


IDLE: dict[str, str | None] = {"state": "IDLE", "reason": None}


def test_each_batch_is_drained_then_resumed_after_verify(
    tmp_path: Path, scontrol_bin: Path
) -> None:
    theirs = {"state": "IDLE+DRAIN", "reason": "replacing a PSU"}
    state = fake_scontrol(
        scontrol_bin, {"gpu-h1": dict(IDLE), "h2": dict(IDLE), "h3": dict(IDLE), "h4": theirs}
    )
    hosts = {**FOUR, "h1": {"slurm_node_name": "gpu-h1"}}
    result, _ = _roll(tmp_path, hosts, batch=parse_batch("2"), slurm_drain=True)
    assert result.ok, result
    slurm = _slurm(state)
    calls = slurm["calls"]
    drains = [c for c in calls if c[:1] == ["update"] and "State=DRAIN" in c]
    assert sorted(c[1] for c in drains) == ["NodeName=gpu-h1", "NodeName=h2", "NodeName=h3"]
    assert all(c[3].startswith("Reason=gpuready-provision: provisioning run ") for c in drains)
    assert Path(result.artifacts_dir).name in drains[0][3]  # the run is named in the reason
    # The first batch is drained and resumed before the second batch is drained.
    first = _updates(calls, "gpu-h1") + _updates(calls, "h2")
    assert len(first) == 4
    assert max(first) < min(_updates(calls, "h3"))
    # Someone else's drain: never overwritten, never resumed.
    assert _updates(calls, "h4") == []
    assert slurm["nodes"]["h4"] == theirs
    assert {name: node["state"] for name, node in slurm["nodes"].items() if name != "h4"} == {
        "gpu-h1": "IDLE",
        "h2": "IDLE",
        "h3": "IDLE",
    }
    assert result.slurm == {}


def test_a_failed_batch_stays_drained_saying_why(tmp_path: Path, scontrol_bin: Path) -> None:
    state = fake_scontrol(scontrol_bin, {name: dict(IDLE) for name in FOUR})
    result, _ = _roll(tmp_path, BROKEN_H2, batch=parse_batch("2"), slurm_drain=True)
    assert not result.ok
    nodes = _slurm(state)["nodes"]
    assert nodes["h2"]["state"] == "IDLE+DRAIN"
    assert nodes["h2"]["reason"].startswith("gpuready-provision: failed (run ")
    assert "nvidia-open-999" in nodes["h2"]["reason"]
    assert nodes["h1"]["state"] == "IDLE+DRAIN"  # stopped midway: not verified either
    assert "stopped: its batch spent the failure budget" in nodes["h1"]["reason"]
    # The roll stopped: the next batch was never drained (its jobs ran on).
    assert nodes["h3"] == IDLE
    assert nodes["h4"] == IDLE
    assert set(result.slurm) == {"h1", "h2"}
    assert result.slurm["h2"].startswith("h2: stays drained: gpuready-provision: failed")

    # The next run drains them again under the new run's reason, and resumes both.
    (tmp_path / "again").mkdir()
    result, _ = _roll(tmp_path / "again", FOUR, batch=parse_batch("2"), slurm_drain=True)
    assert result.ok
    assert {name: node["state"] for name, node in _slurm(state)["nodes"].items()} == dict.fromkeys(
        FOUR, "IDLE"
    )


def test_slurm_drain_off_is_one_skipped_task_each_side(tmp_path: Path, scontrol_bin: Path) -> None:
    state = fake_scontrol(scontrol_bin, {name: dict(IDLE) for name in FOUR})
    result, events = _roll(tmp_path, FOUR)
    assert result.ok
    assert _slurm(state)["calls"] == []
    slurm_tasks = {
        (event.task, event.status)
        for event in events
        if event.host == "h1" and event.final and "Slurm" in event.task
    }
    assert slurm_tasks == {
        ("Drain this batch's Slurm nodes before anything can reboot them", "skipped"),
        ("Resume this batch's Slurm nodes now that gpu_verify passed", "skipped"),
    }


def test_check_mode_drains_nothing(tmp_path: Path, scontrol_bin: Path) -> None:
    state = fake_scontrol(scontrol_bin, {name: dict(IDLE) for name in FOUR})
    result, _ = _roll(tmp_path, FOUR, batch=parse_batch("2"), slurm_drain=True, check=True)
    assert result.ok
    calls = _slurm(state)["calls"]
    assert calls  # it did look
    assert [call for call in calls if call[:1] == ["update"]] == []
