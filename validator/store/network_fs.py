"""Whether the history database lies on a network filesystem, from the mount table.

SQLite's WAL keeps its index in a shared-memory file (``-shm``) that every process
maps; processes on different hosts cannot share that memory, so WAL on NFS, CIFS,
Lustre, GPFS, BeeGFS and the like corrupts a database several nodes write
(https://www.sqlite.org/wal.html, "WAL does not work over a network filesystem").
There the store uses a rollback journal (``journal_mode=DELETE``), which needs only
the byte-range locks the filesystem passes to its server, with a busy timeout; where
those locks stay local to each host (NFS ``nolock``/``local_lock=``, CIFS ``nobrl``)
nothing can keep two hosts' writers apart, and the store refuses with the fix.

``os.statvfs`` has no filesystem type, and ``statfs``'s magic numbers name a FUSE mount
only as FUSE; ``/proc/self/mountinfo`` names each mount's type (``fuse.glusterfs``).
It is read bounded, and the mount holding a folder is the longest mount point above it
(the last listed of equal ones: a later mount hides an earlier one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from validator import limits

MOUNTINFO = Path("/proc/self/mountinfo")
# A host with thousands of mounts (containers, autofs) has a mountinfo of a few MB.
MOUNTINFO_BYTES = 16 << 20

# Filesystem types (mountinfo's field after " - ") whose files are shared between hosts.
NETWORK_TYPES = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "lustre",
        "gpfs",
        "beegfs",
        "ceph",
        "glusterfs",
        "9p",
        "afs",
        "ncpfs",
        "gfs2",
        "ocfs2",
        "panfs",
        "wekafs",
        "pvfs2",
        "orangefs",
        "cvfs",
    }
)
# FUSE filesystems that reach other hosts: fuse.sshfs, fuse.glusterfs, fuse.ceph...
NETWORK_FUSE = frozenset(
    {"sshfs", "glusterfs", "ceph", "cephfs", "s3fs", "rclone", "davfs", "quobyte", "juicefs"}
)
# Mount options with which byte-range locks never leave the host.
_LOCAL_LOCKS = re.compile(r"(?:^|,)(?:nolock|local_lock=(?:all|posix|flock)|nobrl)(?:,|$)")
_OCTAL = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class Mount:
    """One line of mountinfo: where, what type, and its options (mount and superblock)."""

    point: Path
    fstype: str
    options: str

    @property
    def network(self) -> bool:
        """Whether its files are shared with other hosts."""
        kind = self.fstype.lower()
        if kind.startswith("fuse."):
            return kind[len("fuse.") :] in NETWORK_FUSE
        return kind in NETWORK_TYPES

    @property
    def local_locks(self) -> bool:
        """Whether its locks stay on this host (``nolock``, ``local_lock=``, ``nobrl``)."""
        return _LOCAL_LOCKS.search(self.options) is not None


def _decoded(field: str) -> str:
    """A mountinfo path: a space, tab, newline and backslash are written in octal."""
    return _OCTAL.sub(lambda octal: chr(int(octal[1], 8)), field)


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a mountinfo text; a line not in its format is skipped.

    ``36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue``:
    the mount point is the fifth field, the type the first after the ``-`` that ends
    the optional fields, and the superblock options the third.
    """
    mounts = []
    for line in text.splitlines():
        fields = line.split(" ")
        if "-" not in fields[6:]:
            continue
        dash = fields.index("-", 6)
        if len(fields) < dash + 2:
            continue
        options = fields[5]
        if len(fields) > dash + 3:
            options += "," + fields[dash + 3]
        mounts.append(Mount(Path(_decoded(fields[4])), fields[dash + 1], options))
    return mounts


def mount_of(folder: Path, source: Path | None = None) -> Mount | None:
    """The mount holding ``folder`` (resolved, or its nearest existing parent).

    None when the table cannot be read (no /proc, over its bound) or names no mount
    above it.
    """
    try:
        text = limits.read_bounded(source or MOUNTINFO, MOUNTINFO_BYTES).decode("utf-8", "replace")
    except (OSError, limits.OverLimitError):
        return None
    where = folder.resolve()
    while not where.exists() and where != where.parent:
        where = where.parent
    best: Mount | None = None
    for mount in parse_mountinfo(text):
        above = mount.point == where or mount.point in where.parents
        if above and (best is None or len(mount.point.parts) >= len(best.point.parts)):
            best = mount
    return best


__all__ = ["MOUNTINFO", "NETWORK_TYPES", "Mount", "mount_of", "parse_mountinfo"]
