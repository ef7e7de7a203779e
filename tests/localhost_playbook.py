"""Run a test playbook against localhost with the project's roles (the role tests' one runner)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROLES_DIR = Path(__file__).resolve().parent.parent / "playbooks" / "roles"


def run_localhost_playbook(playbook: Path, *, timeout_s: int = 300) -> None:
    """``ansible-playbook -i localhost,`` on ``playbook``; fails the test unless it succeeds."""
    env = {
        **os.environ,
        "ANSIBLE_ROLES_PATH": str(ROLES_DIR),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
    }
    proc = subprocess.run(
        ["ansible-playbook", "-i", "localhost,", str(playbook)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
