"""The drift timer's service unit, rendered by Ansible's own templating: systemd's specifiers.

systemd expands ``%x`` specifiers and ``$VAR`` in ExecStart's arguments, so a path or an
extra argument holding ``%`` or ``$`` must reach it doubled, or the node runs another
command than the inventory asked for.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from tests.ansible_trust import trusted

ROLE = Path(__file__).resolve().parents[2] / "playbooks" / "roles" / "drift_timer"


def _exec_start(**overrides: object) -> str:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    variables = {**defaults, "ansible_managed": "managed", **overrides}
    text = (ROLE / "templates" / "gpuready-drift.service.j2").read_text()
    # ansible-core templates only text marked trusted, as it does a role's own files.
    rendered = Templar(loader=DataLoader(), variables=variables).template(trusted(text))
    lines = [line for line in str(rendered).splitlines() if line.startswith("ExecStart=")]
    assert len(lines) == 1
    return lines[0].removeprefix("ExecStart=")


def _as_systemd_reads_it(command: str) -> list[str]:
    # systemd undoes the doubling, then splits as a shell would for these plain quotes.
    return shlex.split(command.replace("%%", "%").replace("$$", "$"))


def test_percent_and_dollar_reach_systemd_doubled() -> None:
    command = _exec_start(
        drift_timer_db="/var/lib/gpuready/$site/100%.db",
        drift_timer_extra_args=["--deadline", "5m"],
    )
    assert "$$site" in command
    assert "100%%.db" in command
    argv = _as_systemd_reads_it(command)
    assert argv[argv.index("--db") + 1] == "/var/lib/gpuready/$site/100%.db"
    assert argv[-2:] == ["--deadline", "5m"]


def test_plain_values_are_left_as_they_are() -> None:
    argv = _as_systemd_reads_it(_exec_start())
    assert argv[1:4] == ["drift", "--transport", "local"]
    assert "$" not in " ".join(argv)
