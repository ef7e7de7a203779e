"""Secret extra variables never reach ansible-playbook's argv or the run's files on disk.

Runs real ansible-runner and ansible-playbook on localhost (the hosts of
tests/fixtures/provision), as tests/service/test_provision_runner.py does. While a run goes on,
a thread reads every process's command line (/proc/<pid>/cmdline, what ``ps`` shows); after
it, every file under the state directory (run artifacts and ansible-runner's private data
dir) is searched. A canary variable that is not secret is found in both places, so the
searches do find what is there.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import uuid
from pathlib import Path

import pytest

from tests.service.test_provision_runner import HOSTS, _request, _run
from validator.error_tree import BadInputError
from validator.extravars import is_secret_name
from validator.service.provision_service import (
    ProvisionRequest,
    estimate_tasks,
    parse_extra_vars,
    run_provision,
)

pytestmark = pytest.mark.skipif(
    shutil.which("ansible-playbook") is None, reason="ansible-playbook is not installed"
)

# Writes a digest of each secret (never the secret) where the test can check that the
# play was given it; sleeps so the process-list watcher sees ansible-playbook running.
PLAYBOOK = """\
- name: Use the secrets
  hosts: all
  gather_facts: false
  tasks:
    - name: Prove the play got them
      ansible.builtin.copy:
        content: "{{ api_token | hash('sha256') }} {{ db.password | hash('sha256') }}\\n"
        dest: "{{ fixture_dir }}/{{ inventory_hostname }}.digests"
        mode: "0600"
    - name: Stay a moment
      ansible.builtin.command: sleep 1
      changed_when: false
"""


class ProcessWatcher:
    """Reads every process's command line until stopped; keeps those holding a needle."""

    def __init__(self, needles: list[str]) -> None:
        self.needles = [needle.encode() for needle in needles]
        self.found: list[str] = []
        self.seen_ansible = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> ProcessWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _watch(self) -> None:
        while not self._stop.is_set():
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    cmdline = (entry / "cmdline").read_bytes()
                except OSError:
                    continue
                if b"ansible-playbook" in cmdline:
                    self.seen_ansible = True
                for needle in self.needles:
                    if needle in cmdline:
                        self.found.append(cmdline.replace(b"\0", b" ").decode(errors="replace"))
            self._stop.wait(0.02)


def _holding(root: Path, secret: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def _secrets() -> dict[str, str]:
    return {name: f"{name}-{uuid.uuid4().hex}" for name in ("become", "token", "nested", "vault")}


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc")
def test_secrets_reach_the_play_but_no_argv_and_no_file(tmp_path: Path) -> None:
    secrets = _secrets()
    canary = f"canary-{uuid.uuid4().hex}"
    playbook = tmp_path / "secrets.yml"
    playbook.write_text(PLAYBOOK)
    out = tmp_path / "out"
    request = _request(
        tmp_path,
        limit="node-a",
        playbook=str(playbook),
        extra_vars={
            "fixture_dir": str(out),
            "canary": canary,
            "ansible_become_password": secrets["become"],
            "api_token": secrets["token"],
            # A secret one level down in an innocent-looking variable.
            "db": {"host": "db1", "password": secrets["nested"]},
            "vault_password": secrets["vault"],
        },
    )
    with ProcessWatcher([*secrets.values(), canary]) as watcher:
        result, _ = _run(request)
    assert result.ok, result.error
    assert watcher.seen_ansible  # the watcher did look while the play ran
    # The canary is on ansible-playbook's command line: the watcher finds what is there.
    assert any(canary in line for line in watcher.found)
    leaked = [line for line in watcher.found if any(s in line for s in secrets.values())]
    assert leaked == []
    # The play got the secrets (their digests, written by the play itself).
    digests = (out / "node-a.digests").read_text().split()
    assert digests == [
        hashlib.sha256(secrets["token"].encode()).hexdigest(),
        hashlib.sha256(secrets["nested"].encode()).hexdigest(),
    ]
    state = tmp_path / "state"
    assert _holding(state, canary)  # the recorded command line holds the canary ...
    for secret in secrets.values():
        assert _holding(state, secret) == []  # ... and no secret, anywhere
    # They went through a file named on the recorded command line, removed after the run.
    argv = json.loads((Path(result.artifacts_dir) / "command").read_text())["command"]
    pairs = zip(argv, argv[1:])
    files = [Path(value[1:]) for flag, value in pairs if flag == "-e" and value[:1] == "@"]
    assert len(files) == 1
    assert files[0].parent == state / "runner"
    assert not files[0].exists()


def test_the_secrets_file_is_removed_when_the_run_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ansible-runner raising (here at once) still leaves no secrets file behind."""
    import ansible_runner

    seen: list[tuple[str, int]] = []

    def broken(**kwargs: object) -> None:
        cmdline = str(kwargs.get("cmdline") or "")
        path = cmdline.split("@", 1)[1].split(maxsplit=1)[0].strip("'")
        seen.append((Path(path).read_text(), os.stat(path).st_mode & 0o777))
        raise RuntimeError("runner blew up")

    monkeypatch.setattr(ansible_runner, "run", broken)
    secret = f"s-{uuid.uuid4().hex}"
    request = _request(tmp_path, limit="node-a", extra_vars={"api_token": secret})
    with pytest.raises(Exception, match="runner blew up"):
        run_provision(request)
    assert len(seen) == 1
    assert secret in seen[0][0]
    assert seen[0][1] == 0o600
    assert _holding(tmp_path / "state", secret) == []


def test_the_estimate_leaves_secrets_off_its_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    commands: list[list[str]] = []
    real = subprocess.run

    def recording(command: list[str], **kwargs: object) -> object:
        commands.append(list(command))
        return real(command, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(subprocess, "run", recording)
    secret = f"s-{uuid.uuid4().hex}"
    request = _request(tmp_path, extra_vars={"fixture_dir": "x", "ansible_password": secret})
    assert estimate_tasks(request) is not None
    assert commands
    assert not any(secret in " ".join(command) for command in commands)


# ------------------------------------------------------------------ the command line


@pytest.mark.parametrize(
    "name",
    [
        "ansible_become_password",
        "ansible_password",
        "ansible_ssh_pass",
        "ansible_become_pass",
        "vault_password",
        "my_vault_pass",
        "API_TOKEN",
        "client_secret",
        "db_passwd",
        "key_passphrase",
    ],
)
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "driver_version",
        "bypass_checks",
        "compass",
        "passthrough",
        "vault_password_file",
        "tokens_dir",
    ],
)
def test_names_that_are_not_secrets(name: str) -> None:
    assert not is_secret_name(name)


@pytest.mark.parametrize(
    "item",
    [
        "ansible_become_password=hunter2",
        "ansible_ssh_pass=hunter2",
        "API_TOKEN=hunter2",
        "db={host: x, password: hunter2}",
        "ansible_password=[",  # bad YAML too: refused for the name, the value never shown
    ],
)
def test_a_secret_on_the_command_line_is_refused_without_showing_it(item: str) -> None:
    with pytest.raises(BadInputError) as caught:
        parse_extra_vars([item])
    message = str(caught.value)
    assert "hunter2" not in message
    assert "-K" in message
    assert "@FILE" in message
    assert "\n" not in message


def test_a_secret_in_a_vars_file_is_accepted(tmp_path: Path) -> None:
    where = tmp_path / "vars.yml"
    where.write_text("ansible_become_password: hunter2\n")
    assert parse_extra_vars([f"@{where}"]) == {"ansible_become_password": "hunter2"}


def test_a_request_repr_hides_secret_values() -> None:
    request = ProvisionRequest(inventories=(str(HOSTS),), extra_vars={"api_token": "hunter2"})
    assert "hunter2" not in repr(request)
