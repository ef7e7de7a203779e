"""A history store that cannot be written never hides a verdict (issue 30).

Compute nodes often mount the shared folder holding the history read-only, and a
disk fills. Each case sets the real condition up in a mount namespace of its own
(a read-only bind mount, a small tmpfs filled to the last block, an immutable file:
tests run as root, whom chmod does not stop) and runs gpuready there. The verdict
and its exit code come first; the store's failure is one warning on stderr naming
the file and the disk; the NHC line says "not recorded".
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from validator.error_tree import ExitCode

REPO = Path(__file__).resolve().parent.parent.parent
GPUREADY = f"{shlex.quote(sys.executable)} -m validator.cli.main"
HEALTHY = "healthy-8x-h100-sxm"
DRIFTED = "one-gpu-power-capped"  # the same host name, its GPU 3 capped at 500 W


def _can_unshare() -> bool:
    try:
        done = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "true"], check=False, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


pytestmark = pytest.mark.skipif(not _can_unshare(), reason="needs unshare -m (root)")


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


def in_namespace(tmp_path: Path, setup: str, command: str) -> Ran:
    """``setup`` (shell), then gpuready ``command``, in a mount namespace of their own.

    The command's stdout, stderr and exit code are kept outside the namespace's mounts.
    """
    kept = tmp_path / "kept"
    kept.mkdir(exist_ok=True)
    script = (
        "set -e\n"
        f"cd {shlex.quote(str(REPO))}\n"
        f"{setup}\n"
        "set +e\n"
        f"{GPUREADY} {command} > {kept}/out 2> {kept}/err\n"
        f"echo $? > {kept}/code\n"
    )
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "bash", "-c", script],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return Ran(
        int((kept / "code").read_text()), (kept / "out").read_text(), (kept / "err").read_text()
    )


def read_only(folder: Path) -> str:
    quoted = shlex.quote(str(folder))
    return f"mount --bind {quoted} {quoted}\nmount -o remount,ro,bind {quoted} {quoted}"


def certified_history(db: Path) -> None:
    """A history holding a certificate of the healthy node (made outside any namespace)."""
    done = subprocess.run(
        [sys.executable, "-m", "validator.cli.main", "certify", "--simulate", HEALTHY,
         "--burn", "2s", "--db", str(db)],
        cwd=REPO, check=False, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == ExitCode.OK, done.stderr


def warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("gpuready: warning:")]


def test_drift_nhc_on_a_read_only_history_still_reports_the_drift(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    db = shared / "history.db"
    certified_history(db)
    ran = in_namespace(
        tmp_path, read_only(shared), f"drift --simulate {DRIFTED} --nhc --db {db}"
    )
    assert ran.code == ExitCode.NOT_CERTIFIED, ran.err  # the drift, for NHC to drain on
    (line,) = ran.out.splitlines()
    assert line.startswith("gpuready:")
    assert "power_limit (GPU 3)" in line  # the power cap that drifted
    assert line.endswith("(not recorded)")
    (warning,) = warnings(ran.err)
    assert str(db) in warning
    assert "read-only file system" in warning
    assert "error" not in ran.err.replace("warning", "")


def test_certify_into_a_read_only_history_folder_prints_its_verdict_and_exits_by_it(
    tmp_path: Path,
) -> None:
    shared, out = tmp_path / "shared", tmp_path / "reports"
    shared.mkdir()
    db = shared / "history.db"
    certified_history(db)
    ran = in_namespace(
        tmp_path,
        read_only(shared),
        f"certify --simulate {HEALTHY} --burn 1s --db {db} --report-dir {out}",
    )
    assert ran.code == ExitCode.OK, ran.err
    assert "h100-node-01" in ran.out
    assert len(list((out / "certificates").iterdir())) == 1  # the reports are written
    (warning,) = warnings(ran.err)
    assert "the run was not stored" in warning
    assert str(db) in warning


def test_an_immutable_history_file_spools_the_run_beside_it(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    certified_history(db)
    subprocess.run(["chattr", "+i", str(db)], check=True)
    try:
        ran = in_namespace(tmp_path, "true", f"drift --simulate {DRIFTED} --nhc --db {db}")
    finally:
        subprocess.run(["chattr", "-i", str(db)], check=True)
    assert ran.code == ExitCode.NOT_CERTIFIED, ran.err
    assert "power_limit (GPU 3)" in ran.out
    (warning,) = warnings(ran.err)
    assert f"{db}.pending" in warning  # kept for the next writable run
    assert len(list(Path(f"{db}.pending").iterdir())) == 1


def full_disk(folder: Path) -> str:
    """A 512 KiB tmpfs at ``folder``, the history made on it, then filled to the last block."""
    quoted = shlex.quote(str(folder))
    return (
        f"mount -t tmpfs -o size=512k tmpfs {quoted}\n"
        f"{GPUREADY} certify --simulate {HEALTHY} --burn 1s --db {quoted}/history.db"
        " > /dev/null 2>&1\n"
        f"dd if=/dev/zero of={quoted}/filler bs=4k 2> /dev/null || true"
    )


@pytest.mark.parametrize(
    ("scenario", "code"),
    # --nhc: a node that could not be judged fails the check (1), as NHC reads any non-zero
    [(DRIFTED, ExitCode.NOT_CERTIFIED), ("no-gpu-driver", ExitCode.NOT_CERTIFIED)],
    ids=["judged", "nothing-judged"],
)
def test_a_full_disk_is_a_warning_naming_the_disk_never_bad_input(
    tmp_path: Path, scenario: str, code: ExitCode
) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    db = disk / "history.db"
    ran = in_namespace(tmp_path, full_disk(disk), f"drift --simulate {scenario} --nhc --db {db}")
    assert ran.code == code, ran.err  # never 2: a full disk is not the user's input
    assert ran.out.startswith("gpuready:")
    assert ran.out.rstrip().endswith("(not recorded)")
    (warning,) = warnings(ran.err)
    assert f"the disk is full (the file system mounted at {disk})" in warning
    assert "gpuready: error:" not in ran.err


WAIT_FOR_RUN = (
    "import sqlite3, sys, time\n"
    "for _ in range(1200):\n"
    "    try:\n"
    "        db = sqlite3.connect(f'file:{sys.argv[1]}?mode=ro', uri=True)\n"
    "        if db.execute(\"SELECT 1 FROM runs WHERE status = 'running'\").fetchone():\n"
    "            break\n"
    "    except sqlite3.Error:\n"
    "        pass\n"
    "    time.sleep(0.05)\n"
)


def test_a_disk_that_fills_during_a_fleet_run_still_gives_every_verdict(tmp_path: Path) -> None:
    disk, out = tmp_path / "disk", tmp_path / "reports"
    disk.mkdir()
    db = disk / "history.db"
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(
        "[gpu]\n" + "".join(f"gpu0{i} gpuready_simulate={HEALTHY}\n" for i in (1, 2))
    )
    quoted = shlex.quote(str(disk))
    # The run is in history, the burn under way: then the disk fills to its last block.
    filler = (
        f"mount -t tmpfs -o size=1m tmpfs {quoted}\n"
        f"( {shlex.quote(sys.executable)} -c {shlex.quote(WAIT_FOR_RUN)} {db}"
        f" && dd if=/dev/zero of={quoted}/filler bs=4k 2> /dev/null ) &"
    )
    ran = in_namespace(
        tmp_path,
        filler,
        f"certify -i {inventory} --transport local --burn 4s --db {db} --report-dir {out}",
    )
    assert ran.code == ExitCode.OK, ran.err  # both certified: the full disk hides nothing
    assert "gpu01" in ran.out
    assert "gpu02" in ran.out
    report = (out / "report.json").read_text()
    assert report.count('"verdict": "CERTIFIED"') >= 2
    (warning,) = warnings(ran.err)
    assert "the run was not stored" in warning
    assert f"the disk is full (the file system mounted at {disk})" in warning
    assert "gpuready: error:" not in ran.err


def test_the_nhc_line_says_not_recorded_within_its_limit() -> None:
    from tests.judge.test_judge_healthy import healthy_node, judge
    from validator.drift.nhc import NHC_MAX_CHARS, nhc_line

    result = judge(healthy_node())
    long = result.__class__(**{**result.__dict__, "summary": "x" * 1000})
    code, line = nhc_line([long], recorded=False)
    assert len(line) <= NHC_MAX_CHARS
    assert line.endswith(" (not recorded)")
    assert (code, nhc_line([long])[1].endswith("(not recorded)")) == (0, False)


def _leave_a_wal(db: Path) -> None:
    """A write left in ``db``'s -wal, as a controller mid-run leaves one (never checkpointed)."""
    code = (
        "import os, sqlite3, sys\n"
        "c = sqlite3.connect(sys.argv[1])\n"
        "c.execute('PRAGMA wal_autocheckpoint=0')\n"
        "c.execute('CREATE TABLE gpuready_test_unseen (x)')\n"
        "c.commit()\n"
        "os._exit(0)  # no close: the write stays in the -wal\n"
    )
    subprocess.run([sys.executable, "-c", code, str(db)], check=True, timeout=60)
    assert db.with_name(db.name + "-wal").stat().st_size > 0


def test_drift_on_a_read_only_mount_says_revocation_was_not_checked_past_a_wal(
    tmp_path: Path,
) -> None:
    # An immutable read does not see what is still in the -wal: a failed certification
    # there would revoke the certificate unseen, so drift says it could not check.
    shared = tmp_path / "shared"
    shared.mkdir()
    db = shared / "history.db"
    certified_history(db)
    _leave_a_wal(db)
    # without its -shm index (a copy that left it out): SQLite can read it only as it stands
    db.with_name(db.name + "-shm").unlink()
    ran = in_namespace(tmp_path, read_only(shared), f"drift --simulate {HEALTHY} --nhc --db {db}")
    assert ran.code == ExitCode.OK, ran.err
    assert ran.out.startswith("gpuready: ok")
    unchecked = [w for w in warnings(ran.err) if "revocation not checked" in w]
    assert len(unchecked) == 1, ran.err
    assert "history.db-wal are not seen" in unchecked[0]


def test_drift_against_a_certificate_file_with_no_history_says_revocation_was_not_checked(
    tmp_path: Path,
) -> None:
    out = tmp_path / "reports"
    done = subprocess.run(
        [sys.executable, "-m", "validator.cli.main", "certify", "--simulate", HEALTHY,
         "--burn", "2s", "--db", str(tmp_path / "controller.db"), "--report-dir", str(out)],
        cwd=REPO, check=False, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == ExitCode.OK, done.stderr
    (certificate,) = (out / "certificates").iterdir()
    node_db = tmp_path / "node" / "history.db"
    node_db.parent.mkdir()
    ran = subprocess.run(
        [sys.executable, "-m", "validator.cli.main", "drift", "--simulate", HEALTHY, "--nhc",
         "--certificate", str(certificate), "--db", str(node_db)],
        cwd=REPO, check=False, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert ran.returncode == ExitCode.OK, ran.stderr
    assert ran.stdout.startswith("gpuready: ok")
    (warning,) = [w for w in warnings(ran.stderr) if "revocation not checked" in w]
    assert f"the history at {node_db} holds no certification of h100-node-01" in warning
