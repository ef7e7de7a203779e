"""playbooks/drift-timer.yml, real ansible-playbook on localhost: gpuready_agent, then drift_timer.

As an air-gapped site runs it: the wheelhouse holds one small wheel named gpuready (its
entry point prints its version; the real one with its dependencies would take minutes to
gather). gpuready_agent copies it to the node's wheelhouse, makes the virtual environment
with the running Python's venv module, installs with pip --no-index from the copied
wheelhouse alone and links the entry point, which drift_timer's unit then runs. The
node's certificate comes from the controller's report folder. Check mode on a bare node
writes nothing; a run installs; check mode on the converged node changes nothing; a
certificate gone from the report folder (its node failed certify) goes from the node too.
Everything lands under tmp_path (the roles' paths are their variables); the distribution's
python3-venv and systemd are switched off. 4 runs, ~25 s.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks" / "drift-timer.yml"
CERTIFICATE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "certificates"
    / "schema2-h100-node-01-signed.json"
)  # fmt: skip
VERSION = "0.0.1"
_RECAP = re.compile(
    r"^localhost\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M
)

needs_ansible = pytest.mark.skipif(
    shutil.which("ansible-playbook") is None, reason="ansible-playbook missing"
)
# The roles write their files owned by root, as on a node.
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the roles' files are root's: run as root")


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(folder: Path) -> Path:
    """A wheel named gpuready whose console script prints ``gpuready VERSION``."""
    info = f"gpuready-{VERSION}.dist-info"
    files = {
        "gpuready_stub.py": f"def main():\n    print('gpuready {VERSION}')\n".encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: gpuready\nVersion: {VERSION}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
        f"{info}/entry_points.txt": b"[console_scripts]\ngpuready = gpuready_stub:main\n",
    }
    record = [_record_line(name, data) for name, data in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"gpuready-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return wheel


def _playbook(tmp_path: Path, *, check: bool) -> tuple[int, int, str]:
    """Run drift-timer.yml once on localhost; (rc, changed, output)."""
    variables = {
        "gpuready_agent_version": VERSION,
        "gpuready_agent_install_python_venv": "false",
        "gpuready_agent_python": sys.executable,
        "gpuready_agent_venv": str(tmp_path / "opt" / "gpuready"),
        "gpuready_agent_link": str(tmp_path / "bin" / "gpuready"),
        "gpuready_agent_wheelhouse_src": str(tmp_path / "wheels"),
        "gpuready_agent_wheelhouse": str(tmp_path / "node-wheelhouse"),
        "drift_timer_manage_services": "false",
        "drift_timer_unit_dir": str(tmp_path / "units"),
        "drift_timer_db": str(tmp_path / "state" / "history.db"),
        "drift_timer_textfile_dir": str(tmp_path / "textfile"),
        "drift_timer_report_dir": str(tmp_path / "reports"),
        # Beside the database, as the default /var/lib/gpuready/certificate.json is.
        "drift_timer_certificate_path": str(tmp_path / "state" / "certificate.json"),
    }
    argv = ["ansible-playbook", "-i", "localhost,", "-c", "local", str(PLAYBOOK)]
    for key, value in variables.items():
        argv += ["-e", f"{key}={value}"]
    argv += ["--check", "--diff"] if check else []
    env = {
        **os.environ,
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        # No package index can be reached, and none may be asked.
        "PIP_INDEX_URL": "http://127.0.0.1:9/nothing-here",
    }
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    output = proc.stdout + proc.stderr
    match = _RECAP.search(proc.stdout)
    assert match is not None, output[-3000:]
    return proc.returncode, int(match.group(2)), output


def _exec_start(tmp_path: Path) -> str:
    unit = (tmp_path / "units" / "gpuready-drift.service").read_text()
    (line,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    return line


@needs_ansible
@as_root
def test_check_install_rerun_converged_check_and_a_lost_certificate(tmp_path: Path) -> None:
    build_wheel(tmp_path / "wheels")
    (tmp_path / "bin").mkdir()
    (tmp_path / "units").mkdir()  # /etc/systemd/system: every node has it
    (tmp_path / "reports" / "certificates").mkdir(parents=True)
    shutil.copy(CERTIFICATE, tmp_path / "reports" / "certificates" / "localhost.json")

    rc, changed, output = _playbook(tmp_path, check=True)
    assert rc == 0, output[-3000:]
    assert changed > 0  # it says what it would do ...
    for made in ("opt", "node-wheelhouse", "bin/gpuready", "units/gpuready-drift.service", "state"):
        assert not os.path.lexists(tmp_path / made), made  # ... and does none of it

    rc, changed, output = _playbook(tmp_path, check=False)
    assert rc == 0, output[-3000:]
    link = tmp_path / "bin" / "gpuready"
    assert os.readlink(link) == str(tmp_path / "opt" / "gpuready" / "bin" / "gpuready")
    ran = subprocess.run([str(link)], capture_output=True, text=True, check=True)
    assert ran.stdout == f"gpuready {VERSION}\n"
    assert (tmp_path / "node-wheelhouse" / f"gpuready-{VERSION}-py3-none-any.whl").is_file()
    copied = tmp_path / "state" / "certificate.json"
    assert copied.read_bytes() == CERTIFICATE.read_bytes()
    info = copied.stat()
    assert (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid) == (0o644, 0, 0)
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o750  # the database's folder
    assert f"{link} drift " in _exec_start(tmp_path)
    assert f"--certificate {copied}" in _exec_start(tmp_path)

    # Converged: check mode (which predicts what a run would do) finds nothing to change.
    rc, changed, output = _playbook(tmp_path, check=True)
    assert (rc, changed) == (0, 0), output[-3000:]

    # The node failed its next certify: certify removed its certificate from the folder.
    (tmp_path / "reports" / "certificates" / "localhost.json").unlink()
    rc, changed, output = _playbook(tmp_path, check=False)
    assert rc == 0, output[-3000:]
    assert not copied.exists()
    assert "--certificate" not in _exec_start(tmp_path)


@pytest.mark.parametrize("role", ["gpuready_agent", "drift_timer"])
def test_the_roles_have_the_house_layout_and_prefixed_defaults(role: str) -> None:
    import yaml

    folder = PLAYBOOK.parent / "roles" / role
    for part in ("tasks/main.yml", "defaults/main.yml", "meta/main.yml"):
        assert (folder / part).is_file(), part
    defaults = yaml.safe_load((folder / "defaults" / "main.yml").read_text())
    assert [name for name in defaults if not name.startswith(f"{role}_")] == []
    tasks = yaml.safe_load((folder / "tasks" / "main.yml").read_text())
    assert all(task.get("name") for task in tasks)
