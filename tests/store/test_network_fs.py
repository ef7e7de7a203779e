"""Never SQLite WAL on a network filesystem: a rollback journal there, or a refusal.

The mount table is a fake ``/proc/self/mountinfo`` in the kernel's own format (lines as
a host with an NFSv4 home, Lustre, BeeGFS, GPFS and CIFS mounts shows them), its network
mount placed at the test's folder; the database is real SQLite, and its journal mode is
read back with ``PRAGMA journal_mode``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from validator.cli.main import main
from validator.store import Store, StoreError, network_fs, opening
from validator.store.network_fs import mount_of, parse_mountinfo

# Lines as a compute node's /proc/self/mountinfo shows them (optional fields included).
LOCAL = """\
22 27 0:21 / /proc rw,relatime shared:12 - proc proc rw
25 24 0:23 / /dev/shm rw,nosuid,nodev shared:4 - tmpfs tmpfs rw,inode64
27 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
"""
NFS4 = (
    "523 27 0:52 / {point} rw,relatime shared:301 - nfs4 filer01:/export/gpu rw,vers=4.2,"
    "rsize=1048576,wsize=1048576,namlen=255,hard,proto=tcp,timeo=600,retrans=2,sec=sys,"
    "clientaddr=10.0.0.5,local_lock=none,addr=10.0.0.2\n"
)
OTHERS = """\
601 27 0:61 / /lustre rw,relatime shared:350 - lustre 10.0.0.1@o2ib:/lfs rw,flock,lazystatfs
602 27 0:62 / /mnt/beegfs rw shared:351 - beegfs beegfs_nodev rw,cfgFile=/etc/beegfs/c.conf
603 27 0:63 / /gpfs/fs0 rw,relatime shared:352 - gpfs fs0 rw
604 27 0:64 / /mnt/smb\\040share rw,relatime shared:353 - cifs //nas/share rw,vers=3.1.1
605 27 0:65 / /mnt/sshfs rw,nosuid,nodev,relatime shared:354 - fuse.sshfs user@host:/ rw,user_id=0
606 27 0:66 / /mnt/fuse-local rw,relatime shared:355 - fuse.lxcfs lxcfs rw,user_id=0
"""


def fake_mounts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str, name: str = "mountinfo"
) -> None:
    table = tmp_path.parent / f"{tmp_path.name}-{name}"
    table.write_text(text)
    monkeypatch.setattr(network_fs, "MOUNTINFO", table)
    monkeypatch.setattr(opening, "_TOLD", set())


def journal_mode(db: Path) -> str:
    raw = sqlite3.connect(db)
    try:
        return str(raw.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        raw.close()


def record_a_run(db: Path) -> list[str]:
    with Store.open(db) as store:
        run = store.start_run("certify", 1, "p")
        store.finish_run(run)
        return store.take_notices()


def test_the_table_is_read_as_the_kernel_writes_it() -> None:
    mounts = {str(m.point): m for m in parse_mountinfo(LOCAL + NFS4.format(point="/home") + OTHERS)}
    assert {p for p, m in mounts.items() if m.network} == {
        "/home",
        "/lustre",
        "/mnt/beegfs",
        "/gpfs/fs0",
        "/mnt/smb share",
        "/mnt/sshfs",
    }
    assert mounts["/home"].fstype == "nfs4"
    assert not mounts["/home"].local_locks  # local_lock=none: locks go to the server
    assert not mounts["/mnt/fuse-local"].network


def test_the_longest_mount_point_above_the_folder_decides(tmp_path: Path) -> None:
    table = tmp_path / "mountinfo"
    inner = tmp_path / "shared" / "local"
    inner.mkdir(parents=True)
    table.write_text(
        LOCAL
        + NFS4.format(point=tmp_path / "shared")
        + f"700 523 259:2 /scratch {inner} rw,relatime - ext4 /dev/nvme0n1p2 rw\n"
    )
    assert mount_of(tmp_path / "shared" / "x" / "y", table).fstype == "nfs4"  # not made yet
    assert mount_of(inner, table).fstype == "ext4"
    assert mount_of(tmp_path, table).fstype == "ext4"  # the root's
    assert mount_of(tmp_path, tmp_path / "absent") is None


def test_wal_on_a_local_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_mounts(monkeypatch, tmp_path, LOCAL + NFS4.format(point="/elsewhere"))
    db = tmp_path / "history.db"
    assert record_a_run(db) == []
    assert journal_mode(db) == "wal"


def test_a_rollback_journal_on_nfs_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_mounts(monkeypatch, tmp_path, LOCAL + NFS4.format(point=tmp_path))
    db = tmp_path / "history.db"
    notices = record_a_run(db)
    assert journal_mode(db) == "delete"
    assert not db.with_name("history.db-wal").exists()
    assert notices == [
        f"note: history database {db} is on nfs4 (mounted at {tmp_path}): using a rollback "
        "journal (journal_mode=DELETE) with a 30 s busy timeout, not WAL, whose shared "
        "memory cannot be shared between hosts"
    ]
    assert record_a_run(db) == []  # said once
    with Store.open(db, readonly=True) as store:
        assert len(store.history()) == 2


def test_a_wal_database_moved_to_nfs_is_switched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "history.db"
    fake_mounts(monkeypatch, tmp_path, LOCAL)
    record_a_run(db)
    assert journal_mode(db) == "wal"
    fake_mounts(monkeypatch, tmp_path, LOCAL + NFS4.format(point=tmp_path), "nfs")
    record_a_run(db)
    assert journal_mode(db) == "delete"


def test_a_wal_database_held_open_elsewhere_is_refused_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "history.db"
    fake_mounts(monkeypatch, tmp_path, LOCAL)
    record_a_run(db)
    other = sqlite3.connect(db)  # another process's reader, in WAL
    other.execute("SELECT COUNT(*) FROM runs").fetchone()
    try:
        fake_mounts(monkeypatch, tmp_path, LOCAL + NFS4.format(point=tmp_path), "nfs")
        with pytest.raises(StoreError, match="stop the gpuready processes using it"):
            Store.open(db, retry_s=0.1)
    finally:
        other.close()
    assert journal_mode(db) == "wal"  # left as it was


def test_nfs_with_nolock_is_refused_with_the_fix_before_measuring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    nolock = NFS4.format(point=tmp_path).replace("local_lock=none", "local_lock=all")
    fake_mounts(monkeypatch, tmp_path, LOCAL + nolock)
    db = tmp_path / "history.db"
    code = main(["drift", "--simulate", "healthy-8x-h100-sxm", "--db", str(db)])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err == (
        f"gpuready: error: history database {db} is on nfs4 (mounted at {tmp_path}) with locks "
        "kept on each host (nolock, local_lock or nobrl): SQLite cannot keep two hosts' "
        "writers apart there; give a --db on a local disk (the default is node-local), or "
        "remount with locking\n"
    )
    assert not db.exists()


def test_drift_through_the_cli_on_nfs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_mounts(monkeypatch, tmp_path, LOCAL + NFS4.format(point=tmp_path))
    db = tmp_path / "history.db"
    code = main(["drift", "--simulate", "healthy-8x-h100-sxm", "--db", str(db), "--nhc"])
    _, err = capsys.readouterr()
    assert code == 1  # never certified
    assert err.count("journal_mode=DELETE") == 1
    assert journal_mode(db) == "delete"
