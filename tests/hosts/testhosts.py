"""Real SSH test hosts: one network namespace, overlay root and sshd per host.

Every host of a pool shares one Debian root filesystem, built once with
debootstrap and cached (:func:`ensure_rootfs`). Each host gets an overlay over
it, /proc and a minimal /dev, a network namespace joined to a per-run bridge
by a veth pair, a UTS namespace carrying its own hostname, its own ed25519
host key, the run's client key in root's authorized_keys, a simulated GPU
scenario at /etc/gpuready/scenario.json, and sshd on port 22 of its address.

Addresses: a pool claims a *slot* ``S`` (1..99) and uses ``10.213.S.0/24``,
assigned only inside namespaces it made: the bridge ``grtSbr`` holds
``10.213.S.1``, hosts count up from ``10.213.S.10`` and "unreachable" hosts
get addresses counting down from ``10.213.S.254`` that no namespace owns, so
a connection to them fails after ARP gives up (no route to host, about 3 s).
No namespace has a default route, so nothing can leave the machine.

The slot's lock file is held (flock) for the pool's life; a slot whose lock
is free but whose namespaces, bridge, mounts or directory still exist is the
leftover of a crashed run and is torn down by the next pool that starts.

Needs root, ``ip`` (iproute2), ``unshare`` and ``chroot`` (util-linux,
coreutils), and ``debootstrap`` while the root filesystem is not cached yet.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import ctypes
import errno
import fcntl
import hashlib
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

SUITE = "bookworm"
# Kept minimal: python3 runs the agent, numpy the simulated burn-in; sftp for uploads.
PACKAGES: tuple[str, ...] = ("openssh-server", "openssh-sftp-server", "python3", "python3-numpy")
# What a Slurm compute node adds (the shape ``debian12-slurm``).
SLURM_NODE_PACKAGES: tuple[str, ...] = ("munge", "slurm-client", "slurmd")
# Bumped whenever the post-debootstrap tweaks change, so the cache key changes too.
ROOTFS_LAYOUT = 1

CACHE_DIR = Path(os.environ.get("GPUREADY_TESTHOSTS_CACHE", "/var/cache/gpuready-testhosts"))
STATE_DIR = Path(os.environ.get("GPUREADY_TESTHOSTS_STATE", "/var/tmp/gpuready-testhosts"))
NETNS_DIR = Path("/run/netns")

NET_PREFIX = "10.213"
NAME_PREFIX = "grt"
SLOTS = range(1, 100)
BRIDGE_OCTET = 1
FIRST_HOST_OCTET = 10
LAST_OCTET = 254
SSH_PORT = 22
SCENARIO_PATH = "/etc/gpuready/scenario.json"
SSHD_CONFIG = "/etc/ssh/gpuready_sshd_config"
HOST_KEY = "/etc/ssh/gpuready_host_ed25519_key"

_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
_DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"

Scenario = Union[str, Mapping[str, Any], None]


@dataclass(frozen=True)
class HostShape:
    """What distribution a host looks like, over the one Debian root filesystem.

    The root stays Debian 12 (Debian's mirror is the only one reachable); a shape
    adds packages (another cached rootfs, keyed by the package list as any other)
    and writes its release files into each host's overlay at start, so Ansible's
    facts say the shape's distribution while every shape shares the Debian cache.

    Attributes:
        name: ``debian12``, ``ubuntu2404``, ``ubuntu2204``.
        os_release: the ``/etc/os-release`` text ("" keeps Debian's own).
        lsb_release: the ``/etc/lsb-release`` text ("" writes none).
        debian_version: the ``/etc/debian_version`` text (None keeps Debian's).
        packages: more Debian packages for the root filesystem.
    """

    name: str
    os_release: str = ""
    lsb_release: str = ""
    debian_version: str | None = None
    packages: tuple[str, ...] = ()

    def release_files(self) -> dict[str, str]:
        """Path (absolute, in the host) -> content of every file the shape writes."""
        files: dict[str, str] = {}
        if self.os_release:
            # Debian's /etc/os-release is a link to ../usr/lib/os-release: write both.
            files["/etc/os-release"] = self.os_release
            files["/usr/lib/os-release"] = self.os_release
        if self.lsb_release:
            files["/etc/lsb-release"] = self.lsb_release
        if self.debian_version is not None:
            files["/etc/debian_version"] = self.debian_version
        return files


def _ubuntu(version: str, point: str, codename: str, nickname: str, sid: str) -> HostShape:
    # The text of Ubuntu's own /etc/os-release and /etc/lsb-release of that release.
    pretty = f"Ubuntu {point} LTS"
    return HostShape(
        name="ubuntu" + version.replace(".", ""),
        os_release=(
            f'PRETTY_NAME="{pretty}"\nNAME="Ubuntu"\nVERSION_ID="{version}"\n'
            f'VERSION="{point} LTS ({nickname})"\nVERSION_CODENAME={codename}\nID=ubuntu\n'
            'ID_LIKE=debian\nHOME_URL="https://www.ubuntu.com/"\n'
            'SUPPORT_URL="https://help.ubuntu.com/"\n'
            'BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"\n'
            'PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"\n'
            f"UBUNTU_CODENAME={codename}\nLOGO=ubuntu-logo\n"
        ),
        lsb_release=(
            f"DISTRIB_ID=Ubuntu\nDISTRIB_RELEASE={version}\nDISTRIB_CODENAME={codename}\n"
            f'DISTRIB_DESCRIPTION="{pretty}"\n'
        ),
        debian_version=f"{sid}/sid\n",
    )


SHAPES: dict[str, HostShape] = {
    "debian12": HostShape("debian12"),
    "ubuntu2404": _ubuntu("24.04", "24.04.1", "noble", "Noble Numbat", "trixie"),
    "ubuntu2204": _ubuntu("22.04", "22.04.5", "jammy", "Jammy Jellyfish", "bookworm"),
    # Debian 12 with a Slurm compute node's packages (tests/hosts/slurmcluster.py):
    # slurmd, munge, and slurm-client for the scontrol a health check drains itself with.
    "debian12-slurm": HostShape("debian12-slurm", packages=SLURM_NODE_PACKAGES),
}


def host_shape(shape: str | HostShape) -> HostShape:
    """A shape by name (a key of :data:`SHAPES`), or the shape itself.

    Raises:
        HostsError: for an unknown name.
    """
    if isinstance(shape, HostShape):
        return shape
    try:
        return SHAPES[shape]
    except KeyError:
        known = ", ".join(sorted(SHAPES))
        raise HostsError(f"unknown host shape {shape!r}; one of {known}") from None


class HostsUnavailable(RuntimeError):
    """Test hosts cannot be made on this machine (not root, a tool missing, no rootfs)."""


class HostsError(RuntimeError):
    """A test host misbehaved after it was made (sshd died, a command failed)."""


# ---------------------------------------------------------------- small helpers


_libc = ctypes.CDLL(None, use_errno=True)
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_BIND = 4096
MS_RDONLY = 1
MS_REMOUNT = 32
MNT_DETACH = 2


def _mount(source: str, target: Path, fstype: str, flags: int = 0, data: str = "") -> None:
    # Through libc rather than mount(8): 64 hosts need hundreds of mounts.
    rc = _libc.mount(
        source.encode(), str(target).encode(), fstype.encode(), flags, data.encode() or None
    )
    if rc != 0:
        err = ctypes.get_errno()
        raise HostsError(f"mount {fstype} on {target}: {os.strerror(err)}")


def _umount(target: str) -> bool:
    """Unmount ``target``, lazily when busy; False when even that failed."""
    for flags in (0, MNT_DETACH):
        if _libc.umount2(target.encode(), flags) == 0:
            return True
        if ctypes.get_errno() in (errno.EINVAL, errno.ENOENT):
            return True  # not a mount point (any more)
    return False


def _unescape_mount_path(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below ``path``, most recently mounted first."""
    prefix = str(path).rstrip("/")
    found: list[str] = []
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        for line in mounts:
            point = _unescape_mount_path(line.split()[1])
            if point == prefix or point.startswith(prefix + "/"):
                found.append(point)
    found.reverse()
    return found


def unmount_all_under(path: Path) -> list[str]:
    """Unmount everything at or below ``path``, newest first; returns what is left."""
    for _ in range(3):
        remaining = mounts_under(path)
        if not remaining:
            return []
        for point in remaining:
            _umount(point)
    return mounts_under(path)


def _run(argv: Sequence[str], stdin: str | None = None, timeout: float = 60.0) -> str:
    proc = subprocess.run(
        list(argv),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_ENV,
        check=False,
    )
    if proc.returncode != 0:
        raise HostsError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def _ip_batch(lines: Iterable[str], netns: str | None = None, force: bool = False) -> None:
    text = "".join(line + "\n" for line in lines)
    if not text:
        return
    argv = ["ip"]
    if netns:
        argv += ["-n", netns]
    if force:
        argv.append("-force")
    _run([*argv, "-batch", "-"], stdin=text)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _netns_inode(name: str) -> tuple[int, int] | None:
    try:
        st = os.stat(NETNS_DIR / name)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def pids_in_netns(names: Iterable[str]) -> dict[str, list[int]]:
    """The processes living in each named network namespace."""
    wanted = {inode: name for name in names if (inode := _netns_inode(name)) is not None}
    found: dict[str, list[int]] = {name: [] for name in wanted.values()}
    if not wanted:
        return found
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            st = os.stat(f"/proc/{entry}/ns/net")
        except OSError:
            continue
        name = wanted.get((st.st_dev, st.st_ino))
        if name is not None:
            found[name].append(int(entry))
    return found


def processes_mentioning(path: Path) -> list[int]:
    """Processes (not this one) whose command line names ``path`` or a path below it."""
    prefix = str(path).rstrip("/")
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        for raw in args:
            arg = raw.decode(errors="replace")
            if arg == prefix or prefix + "/" in arg:
                found.append(int(entry))
                break
    return found


def _kill_netns_processes(names: Sequence[str], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        pids = [pid for group in pids_in_netns(names).values() for pid in group]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)


def _kill_mentioning(path: Path, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        pids = processes_mentioning(path)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            # Our own children stay zombies (still listed) until reaped.
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)


def generate_ed25519() -> tuple[bytes, str]:
    """A new ed25519 key: (OpenSSH private key file bytes, ``ssh-ed25519 AAAA...`` line)."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return private, public.decode("ascii")


def _write(path: Path, text: str | bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode() if isinstance(text, str) else text
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(path, mode)


# ---------------------------------------------------------------- the root filesystem


def check_prerequisites(*, building: bool) -> None:
    """Raise :class:`HostsUnavailable` naming what this machine lacks.

    Args:
        building: whether debootstrap will be needed (the rootfs is not cached).
    """
    if os.geteuid() != 0:
        raise HostsUnavailable("test hosts need root (network namespaces, mounts, chroot)")
    tools = ["ip", "unshare", "chroot"] + (["debootstrap"] if building else [])
    missing = [tool for tool in tools if shutil.which(tool, path=_ENV["PATH"]) is None]
    if missing:
        raise HostsUnavailable(
            f"test hosts need {', '.join(missing)} (apt-get install iproute2 util-linux "
            "coreutils debootstrap)"
        )
    if not Path("/proc/self/ns/net").exists():
        raise HostsUnavailable("this kernel has no network namespaces")


def _apt_source_entries(apt: Path) -> Iterator[tuple[list[str], list[str], list[str], list[str]]]:
    """(types, uris, suites, components) of each apt source configured under ``apt``."""
    one_line = [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*.list"))]
    for path in one_line:
        with contextlib.suppress(OSError):
            for raw in path.read_text(encoding="utf-8").splitlines():
                line = re.sub(r"\[[^\]]*\]", " ", raw.split("#", 1)[0]).split()
                if len(line) >= 3:
                    yield [line[0]], [line[1]], [line[2]], line[3:]
    for path in sorted((apt / "sources.list.d").glob("*.sources")):
        with contextlib.suppress(OSError):
            text = path.read_text(encoding="utf-8")
            for stanza in re.split(r"\n\s*\n", text):
                fields: dict[str, list[str]] = {}
                for raw in stanza.splitlines():
                    if raw.startswith("#") or ":" not in raw or raw[:1].isspace():
                        continue
                    key, value = raw.split(":", 1)
                    fields[key.strip().lower()] = value.split()
                if fields.get("enabled", ["yes"])[0].lower() == "no":
                    continue
                yield (
                    fields.get("types", []),
                    fields.get("uris", []),
                    fields.get("suites", []),
                    fields.get("components", []),
                )


def apt_mirror(suite: str = SUITE, apt_dir: Path = Path("/etc/apt")) -> str:
    """The Debian mirror apt on this machine uses for ``suite`` main.

    ``GPUREADY_TESTHOSTS_MIRROR`` overrides it.

    Args:
        suite: the Debian suite wanted.
        apt_dir: apt's configuration directory.

    Raises:
        HostsUnavailable: when apt has no such source.
    """
    override = os.environ.get("GPUREADY_TESTHOSTS_MIRROR")
    if override:
        return override
    for types, uris, suites, components in _apt_source_entries(apt_dir):
        if "deb" in types and suite in suites and "main" in components and uris:
            return uris[0]
    raise HostsUnavailable(
        f"no apt source for {suite} main in /etc/apt/sources.list(.d); "
        "set GPUREADY_TESTHOSTS_MIRROR to a Debian mirror"
    )


def rootfs_key(packages: Sequence[str] = PACKAGES, suite: str = SUITE) -> str:
    """The cache key of a root filesystem: a hash of the suite, packages and layout."""
    text = json.dumps([suite, sorted(set(packages)), ROOTFS_LAYOUT])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cached_rootfs(
    packages: Sequence[str] = PACKAGES, suite: str = SUITE, cache_dir: Path = CACHE_DIR
) -> Path | None:
    """The cached root filesystem for these packages, or None when not built yet."""
    path = cache_dir / f"rootfs-{rootfs_key(packages, suite)}"
    return path if (path / ".gpuready-complete").is_file() else None


def _tweak_rootfs(root: Path, packages: Sequence[str], suite: str) -> None:
    # Each host gets its own host key; debootstrap's would be shared by all of them.
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    # sshd's privilege-separation directory (systemd's tmpfiles makes it on a real host).
    (root / "run/sshd").mkdir(mode=0o755, parents=True, exist_ok=True)
    (root / "etc/gpuready").mkdir(mode=0o755, exist_ok=True)
    (root / "root/.ssh").mkdir(mode=0o700, exist_ok=True)
    # Nothing in the tests reads these; dropping them halves the copy-up footprint.
    for junk in (
        "var/cache/apt/archives",
        "var/lib/apt/lists",
        "usr/share/doc",
        "usr/share/man",
        "usr/share/locale",
    ):
        target = root / junk
        if target.is_dir():
            for child in target.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                elif child.name != "lock":
                    child.unlink()
    _write(
        root / ".gpuready-complete",
        json.dumps({"suite": suite, "packages": sorted(packages), "layout": ROOTFS_LAYOUT}),
    )


def ensure_rootfs(
    packages: Sequence[str] = PACKAGES,
    suite: str = SUITE,
    cache_dir: Path = CACHE_DIR,
    timeout: float = 1200.0,
) -> Path:
    """The cached Debian root filesystem, built with debootstrap on first use.

    Built into a temporary directory and renamed into place, under a lock so
    that concurrent callers build it once.

    Raises:
        HostsUnavailable: when it cannot be built (no root, no debootstrap, no mirror).
    """
    ready = cached_rootfs(packages, suite, cache_dir)
    if ready is not None:
        return ready
    check_prerequisites(building=True)
    cache_dir.mkdir(parents=True, exist_ok=True)
    key = rootfs_key(packages, suite)
    final = cache_dir / f"rootfs-{key}"
    with open(cache_dir / "build.lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ready = cached_rootfs(packages, suite, cache_dir)
        if ready is not None:
            return ready
        # Under the lock any temporary tree is a crashed build's; debootstrap may
        # have left /proc or /sys mounted in it.
        for stale in cache_dir.glob("rootfs-*.tmp-*"):
            if not unmount_all_under(stale):
                shutil.rmtree(stale, ignore_errors=True)
        if final.exists() and not unmount_all_under(final):
            shutil.rmtree(final, ignore_errors=True)
        mirror = apt_mirror(suite)
        tmp = cache_dir / f"rootfs-{key}.tmp-{os.getpid()}"
        log = cache_dir / f"build-{key}.log"
        argv = ["debootstrap", "--variant=minbase", f"--include={','.join(sorted(packages))}"]
        if Path(_DEBIAN_KEYRING).is_file():
            argv.append(f"--keyring={_DEBIAN_KEYRING}")
        argv += [suite, str(tmp), mirror]
        env = {**_ENV, **{k: v for k, v in os.environ.items() if k.lower().endswith("_proxy")}}
        try:
            with open(log, "w", encoding="utf-8") as out:
                proc = subprocess.run(
                    argv,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    timeout=timeout,
                    check=False,
                )
        except subprocess.TimeoutExpired:
            proc = None
        if proc is None or proc.returncode != 0:
            unmount_all_under(tmp)
            shutil.rmtree(tmp, ignore_errors=True)
            tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-5:]
            raise HostsUnavailable(
                f"debootstrap of {suite} from {mirror} failed (log: {log}): " + " | ".join(tail)
            )
        left = unmount_all_under(tmp)
        if left:
            raise HostsUnavailable(f"debootstrap left mounts that would not go: {left}")
        _tweak_rootfs(tmp, packages, suite)
        os.rename(tmp, final)
        return final


# ---------------------------------------------------------------- slots and leftovers


def _slot_names(slot: int) -> tuple[str, str]:
    """(bridge name, host namespace name prefix) of a slot."""
    return f"{NAME_PREFIX}{slot}br", f"{NAME_PREFIX}{slot}h"


def _slot_netns(slot: int) -> list[str]:
    _, prefix = _slot_names(slot)
    try:
        names = os.listdir(NETNS_DIR)
    except OSError:
        return []
    return sorted(n for n in names if re.fullmatch(re.escape(prefix) + r"\d+", n))


def _slot_veths(slot: int) -> list[str]:
    _, prefix = _slot_names(slot)
    try:
        names = os.listdir("/sys/class/net")
    except OSError:
        return []
    return sorted(n for n in names if re.fullmatch(re.escape(prefix) + r"\d+", n))


def _link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def teardown_slot(slot: int, state_dir: Path = STATE_DIR) -> list[str]:
    """Remove a slot's processes, mounts, namespaces, bridge and directory.

    Returns:
        What could not be removed, one line each (empty when all went).
    """
    problems: list[str] = []
    namespaces = _slot_netns(slot)
    _kill_netns_processes(namespaces)
    run_dir = state_dir / f"slot-{slot}"
    # Daemons on this machine's side that serve the slot's hosts (a test Slurm
    # cluster's slurmctld and munged) name files in the run directory.
    _kill_mentioning(run_dir)
    problems += [f"mount {point}" for point in unmount_all_under(run_dir)]
    # Deleting the root-side veth ends first is synchronous; a namespace's own
    # teardown in the kernel is not, and would leave the links for a moment.
    veths = _slot_veths(slot)
    if veths or namespaces:
        with contextlib.suppress(HostsError):
            _ip_batch(
                [
                    *(f"link del {veth}" for veth in veths),
                    *(f"netns del {ns}" for ns in namespaces),
                ],
                force=True,
            )
    deadline = time.monotonic() + 5.0
    while _slot_veths(slot) and time.monotonic() < deadline:
        time.sleep(0.05)
    bridge, _ = _slot_names(slot)
    if _link_exists(bridge):
        with contextlib.suppress(HostsError):
            _run(["ip", "link", "del", bridge])
    problems += [f"netns {ns}" for ns in _slot_netns(slot)]
    problems += [f"link {veth}" for veth in _slot_veths(slot)]
    if _link_exists(bridge):
        problems.append(f"link {bridge}")
    # Never delete through a mount (the lower root or /dev could be reached).
    if run_dir.exists() and not mounts_under(run_dir):
        shutil.rmtree(run_dir, ignore_errors=True)
        if run_dir.exists():
            problems.append(f"directory {run_dir}")
    return problems


def _try_lock(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _slots_with_leftovers(state_dir: Path) -> set[int]:
    slots: set[int] = set()
    with contextlib.suppress(OSError):
        for name in os.listdir(NETNS_DIR):
            match = re.fullmatch(re.escape(NAME_PREFIX) + r"(\d+)h\d+", name)
            if match:
                slots.add(int(match.group(1)))
    with contextlib.suppress(OSError):
        for name in os.listdir("/sys/class/net"):
            match = re.fullmatch(re.escape(NAME_PREFIX) + r"(\d+)br", name)
            if match:
                slots.add(int(match.group(1)))
    if state_dir.is_dir():
        for entry in state_dir.glob("slot-*"):
            match = re.fullmatch(r"slot-(\d+)", entry.name)
            if match and entry.is_dir():
                slots.add(int(match.group(1)))
    return slots


def cleanup_stale(state_dir: Path = STATE_DIR) -> dict[int, list[str]]:
    """Tear down the leftovers of every slot whose owner is gone.

    Returns:
        The slots cleaned, each with what could not be removed.
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    cleaned: dict[int, list[str]] = {}
    for slot in sorted(_slots_with_leftovers(state_dir)):
        fd = _try_lock(state_dir / f"slot-{slot}.lock")
        if fd is None:
            continue  # a live pool owns it
        try:
            cleaned[slot] = teardown_slot(slot, state_dir)
        finally:
            os.close(fd)
    return cleaned


def _foreign_networks() -> list[ipaddress.IPv4Network]:
    """Networks routed on this machine by anything but our bridges."""
    out = _run(["ip", "-4", "-o", "route", "show", "table", "all"])
    nets: list[ipaddress.IPv4Network] = []
    for line in out.splitlines():
        words = line.split()
        if not words or words[0] in ("default", "broadcast", "local", "unreachable"):
            continue
        dev = words[words.index("dev") + 1] if "dev" in words else ""
        if re.fullmatch(re.escape(NAME_PREFIX) + r"\d+br", dev):
            continue
        with contextlib.suppress(ValueError):
            net = ipaddress.IPv4Network(words[0], strict=False)
            if net.prefixlen > 0:
                nets.append(net)
    return nets


def slot_network(slot: int) -> ipaddress.IPv4Network:
    """The /24 a slot assigns inside its namespaces."""
    return ipaddress.IPv4Network(f"{NET_PREFIX}.{slot}.0/24")


# ---------------------------------------------------------------- hosts


@dataclass
class TestHost:
    """One test host: its own netns, overlay root, hostname, host key and sshd.

    ``reachable`` False marks an address in the pool's /24 that no namespace
    owns: connections to it fail (no route to host) after about 3 seconds.
    """

    __test__ = False  # not a pytest test class

    name: str
    address: str
    key_file: Path
    scenario: Scenario
    reachable: bool = True
    port: int = SSH_PORT
    user: str = "root"
    netns: str = ""
    root: Path = Path()
    host_dir: Path = Path()
    host_key_line: str = ""
    shape: HostShape = field(default_factory=lambda: SHAPES["debian12"])
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def host_key(self) -> paramiko.PKey:
        """The host's public host key, as paramiko compares it."""
        self._require_reachable()
        blob = self.host_key_line.split()[1]
        return paramiko.Ed25519Key(data=base64.b64decode(blob))

    @property
    def log_file(self) -> Path:
        """sshd's log (its stderr)."""
        return self.host_dir / "sshd.log"

    def _require_reachable(self) -> None:
        if not self.reachable:
            raise HostsError(f"{self.name} ({self.address}) is an unreachable host by design")

    def _chroot_argv(self, argv: Sequence[str]) -> list[str]:
        # A fresh UTS namespace per command carries the host's name into it.
        return [
            "ip",
            "netns",
            "exec",
            self.netns,
            "unshare",
            "--uts",
            "chroot",
            str(self.root),
            "/bin/sh",
            "-c",
            'hostname "$0" && exec "$@"',
            self.name,
            *argv,
        ]

    def run(self, command: str, timeout: float = 60.0) -> tuple[int, str, str]:
        """Run a shell command inside the host (its netns, UTS namespace and chroot).

        Not over SSH: for test set-up and inspection.

        Returns:
            (exit status, stdout, stderr).
        """
        self._require_reachable()
        proc = subprocess.run(
            self._chroot_argv(["/bin/sh", "-c", command]),
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**_ENV, "HOME": "/root"},
            check=False,
        )
        return proc.returncode, proc.stdout, proc.stderr

    # ------------------------------------------------------------ sshd

    def start_sshd(self, timeout: float = 15.0) -> None:
        """Start sshd and wait until it accepts TCP connections.

        Raises:
            HostsError: when sshd exits or does not listen in time.
        """
        self._require_reachable()
        with self._lock:
            if self.process is not None and self.process.poll() is None:
                return
            self.process = self._spawn_sshd()
        self.wait_listening(timeout)

    def _spawn_sshd(self) -> subprocess.Popen[bytes]:
        # The child keeps its own copy of the descriptor.
        with open(self.log_file, "ab") as log:
            return subprocess.Popen(
                self._chroot_argv(["/usr/sbin/sshd", "-D", "-e", "-f", SSHD_CONFIG]),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_ENV,
                start_new_session=True,
            )

    def wait_listening(self, timeout: float = 15.0) -> None:
        """Wait until sshd accepts TCP connections on the host's address.

        Raises:
            HostsError: when sshd exited or did not listen within ``timeout``.
        """
        deadline = time.monotonic() + timeout
        while True:
            proc = self.process
            if proc is None or proc.poll() is not None:
                raise HostsError(f"sshd of {self.name} exited: {self._log_tail()}")
            try:
                with socket.create_connection((self.address, self.port), timeout=0.5):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise HostsError(
                        f"sshd of {self.name} not listening on {self.address}:{self.port} "
                        f"after {timeout:.0f} s: {self._log_tail()}"
                    ) from None
                time.sleep(0.02)

    def _log_tail(self) -> str:
        try:
            lines = self.log_file.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(lines[-5:]) or "(empty log)"

    def stop_sshd(self) -> None:
        """Kill sshd and every other process in the host; connections are then refused."""
        self._require_reachable()
        with self._lock:
            _kill_netns_processes([self.netns])
            if self.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(timeout=5)
                self.process = None

    def rotate_host_key(self) -> str:
        """Give the host a new host key and restart sshd with it.

        Returns:
            The new public key line.
        """
        self._require_reachable()
        self.stop_sshd()
        self._write_host_key()
        self.start_sshd()
        return self.host_key_line

    def _write_host_key(self) -> None:
        private, public = generate_ed25519()
        _write(self.root / HOST_KEY.lstrip("/"), private, 0o600)
        _write(self.root / (HOST_KEY.lstrip("/") + ".pub"), public + f" root@{self.name}\n")
        self.host_key_line = public

    # ------------------------------------------------------------ scenario

    def set_scenario(self, scenario: str | Mapping[str, Any]) -> None:
        """Write the host's simulated GPU scenario to /etc/gpuready/scenario.json.

        Args:
            scenario: a built-in scenario name (the file then extends it and
                sets ``host.hostname`` to this host's name), or a whole
                scenario object, written as given.
        """
        self._require_reachable()
        if isinstance(scenario, str):
            from validator.node.sim.scenario import load_scenario

            builtin = load_scenario(scenario)
            data: Mapping[str, Any] = {
                "name": scenario,
                "description": builtin.description,
                "extends": scenario,
                "host": {"hostname": self.name},
            }
        else:
            data = scenario
        _write(self.root / SCENARIO_PATH.lstrip("/"), json.dumps(data, indent=2) + "\n")
        self.scenario = scenario

    def scenario_file(self) -> Path:
        """Where the scenario file lies, seen from this machine."""
        return self.root / SCENARIO_PATH.lstrip("/")

    # ------------------------------------------------------------ binds

    def bind(self, path: Path | str, *, read_only: bool = False) -> Path:
        """Bind-mount this machine's ``path`` into the host at the same absolute path.

        Like a shared filesystem (an NFS home): what one side writes the other
        reads. Not recursive: mounts below ``path`` on this machine are not carried.

        Args:
            path: an absolute path of a directory or file on this machine.
            read_only: whether the host sees it read-only.

        Returns:
            Where the mount point lies, seen from this machine.

        Raises:
            HostsError: for a relative or missing path, or when the mount fails.
        """
        self._require_reachable()
        source = Path(path)
        target = self._inner_path(source)
        if source.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.touch(exist_ok=True)
        _mount(str(source), target, "none", MS_BIND)
        if read_only:
            try:
                _mount("none", target, "none", MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)
            except HostsError:
                _umount(str(target))
                raise
        return target

    def unbind(self, path: Path | str) -> None:
        """Undo :meth:`bind` (nothing happens when ``path`` is not bound).

        Raises:
            HostsError: when the mount would not go.
        """
        self._require_reachable()
        target = self._inner_path(Path(path), create=False)
        if str(target) in mounts_under(target) and not _umount(str(target)):
            raise HostsError(f"could not unmount {target}")

    def _inner_path(self, path: Path, create: bool = True) -> Path:
        # The kernel resolves a mount target from this machine's root: a symlink
        # in the host's tree (Debian's /var/run -> /run) would land outside it.
        if not path.is_absolute() or ".." in path.parts or path == Path("/"):
            raise HostsError(f"bind needs an absolute path other than /, not {str(path)!r}")
        if create and not path.exists():
            raise HostsError(f"cannot bind {path} into {self.name}: no such file or directory")
        target = self.root
        for part in path.parts[1:]:
            target = target / part
            if target.is_symlink():
                raise HostsError(
                    f"cannot bind {path} into {self.name}: {target} is a symlink in its root"
                )
        return target


def _sshd_config(address: str, port: int) -> str:
    return "\n".join(
        [
            f"ListenAddress {address}:{port}",
            f"HostKey {HOST_KEY}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "AuthorizedKeysFile .ssh/authorized_keys",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            # No PAM stack is configured in the chroot; keys are all the tests use.
            "UsePAM no",
            "UseDNS no",
            "PidFile none",
            # A fan-out opens many sessions at once; sshd's defaults drop some.
            "MaxStartups 200:30:400",
            "MaxSessions 64",
            "LogLevel INFO",
            "AcceptEnv LANG LC_*",
            "Subsystem sftp /usr/lib/openssh/sftp-server",
            "",
        ]
    )


# ---------------------------------------------------------------- the pool


class TestHostPool:
    """A set of test hosts on one private /24; a context manager that tears all down.

    Args:
        packages: the root filesystem's packages (the cache key includes them).
        shape: the hosts' distribution shape (:data:`SHAPES`); ``start`` may give
            another per call.
        name_prefix: hosts are named ``{name_prefix}01``, ``{name_prefix}02``, ...
        workers: how many hosts are set up at once.
        state_dir: where per-run directories and slot locks live.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        *,
        packages: Sequence[str] = PACKAGES,
        shape: str | HostShape = "debian12",
        name_prefix: str = "node",
        workers: int = 16,
        state_dir: Path = STATE_DIR,
    ) -> None:
        self.packages = tuple(packages)
        self.shape = host_shape(shape)
        self._rootfs: dict[tuple[str, ...], Path] = {}
        self.name_prefix = name_prefix
        self.workers = workers
        self.state_dir = state_dir
        self.hosts: list[TestHost] = []
        self.slot = 0
        self.rootfs = Path()
        self.run_dir = Path()
        self.key_file = Path()
        self.client_public_key = ""
        self._lock_fd: int | None = None
        self._next_up = FIRST_HOST_OCTET
        self._next_down = LAST_OCTET
        self._count = 0
        self._closed = False
        self.binds: dict[Path, bool] = {}

    @property
    def network(self) -> ipaddress.IPv4Network:
        """The pool's /24."""
        return slot_network(self.slot)

    @property
    def bridge(self) -> str:
        """The bridge in the root namespace that every host's veth joins."""
        return _slot_names(self.slot)[0]

    def __enter__(self) -> TestHostPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------ set-up

    def _open(self) -> None:
        self.rootfs = self.rootfs_for(self.shape)
        check_prerequisites(building=False)
        cleanup_stale(self.state_dir)
        foreign = _foreign_networks()
        for slot in SLOTS:
            if any(slot_network(slot).overlaps(net) for net in foreign):
                continue
            fd = _try_lock(self.state_dir / f"slot-{slot}.lock")
            if fd is None:
                continue
            if _slots_with_leftovers(self.state_dir) & {slot}:
                teardown_slot(slot, self.state_dir)
            self.slot, self._lock_fd = slot, fd
            break
        else:
            raise HostsUnavailable(f"no free slot in {NET_PREFIX}.1-99.0/24")
        atexit.register(self.close)
        self.run_dir = self.state_dir / f"slot-{self.slot}"
        self.run_dir.mkdir(mode=0o700, parents=True)
        private, public = generate_ed25519()
        self.key_file = self.run_dir / "id_ed25519"
        _write(self.key_file, private, 0o600)
        _write(self.run_dir / "id_ed25519.pub", public + " gpuready-tests\n")
        self.client_public_key = public
        gateway = self.network.network_address + BRIDGE_OCTET
        _ip_batch(
            [
                f"link add {self.bridge} type bridge",
                f"addr add {gateway}/24 dev {self.bridge}",
                f"link set {self.bridge} up",
            ]
        )

    def rootfs_for(self, shape: HostShape) -> Path:
        """The cached root filesystem of the pool's packages plus the shape's."""
        packages = tuple(sorted({*self.packages, *shape.packages}))
        if packages not in self._rootfs:
            self._rootfs[packages] = ensure_rootfs(packages)
        return self._rootfs[packages]

    def start(
        self, scenarios: Sequence[Scenario], shape: str | HostShape | None = None
    ) -> list[TestHost]:
        """Make one host per entry and start their sshds; more calls add more hosts.

        Args:
            scenarios: per host a built-in scenario name or a scenario object,
                or None for an unreachable host (an address nobody owns).
            shape: these hosts' distribution shape; None for the pool's.

        Returns:
            The new hosts, in order.
        """
        if self._closed:
            raise HostsError("this pool is closed")
        chosen = self.shape if shape is None else host_shape(shape)
        if not self.slot:
            self._open()
        self.rootfs_for(chosen)
        new: list[TestHost] = []
        for scenario in scenarios:
            self._count += 1
            name = f"{self.name_prefix}{self._count:02d}"
            if scenario is None:
                octet, self._next_down = self._next_down, self._next_down - 1
            else:
                octet, self._next_up = self._next_up, self._next_up + 1
            if self._next_up > self._next_down + 1:
                raise HostsError(f"a pool holds at most {LAST_OCTET - FIRST_HOST_OCTET + 1} hosts")
            host = TestHost(
                name=name,
                address=str(self.network.network_address + octet),
                key_file=self.key_file,
                scenario=scenario,
                reachable=scenario is not None,
                shape=chosen,
            )
            if host.reachable:
                host.netns = f"{_slot_names(self.slot)[1]}{octet}"
                host.host_dir = self.run_dir / "hosts" / name
                host.root = host.host_dir / "root"
            new.append(host)
        self.hosts += new
        live = [h for h in new if h.reachable]
        if live:
            self._create_links(live)
            with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(live)))) as pool:
                list(pool.map(self._prepare, live))
                list(pool.map(lambda h: h.wait_listening(30.0), live))
        return new

    def _create_links(self, hosts: Sequence[TestHost]) -> None:
        lines: list[str] = []
        for host in hosts:
            lines += [
                f"netns add {host.netns}",
                f"link add {host.netns} type veth peer name eth0 netns {host.netns}",
                f"link set {host.netns} master {self.bridge} up",
            ]
        _ip_batch(lines)

    def _prepare(self, host: TestHost) -> None:
        _ip_batch(
            [f"addr add {host.address}/24 dev eth0", "link set lo up", "link set eth0 up"],
            netns=host.netns,
        )
        upper, work = host.host_dir / "upper", host.host_dir / "work"
        for path in (upper, work, host.root):
            path.mkdir(parents=True)
        _mount(
            "overlay",
            host.root,
            "overlay",
            data=f"lowerdir={self.rootfs_for(host.shape)},upperdir={upper},workdir={work}",
        )
        _mount("proc", host.root / "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        _populate_dev(host.root / "dev")
        root = host.root
        for inner, text in host.shape.release_files().items():
            target = root / inner.lstrip("/")
            if target.is_symlink():
                target.unlink()
            _write(target, text)
        _write(root / "etc/hostname", host.name + "\n")
        _write(root / "etc/hosts", f"127.0.0.1\tlocalhost\n{host.address}\t{host.name}\n")
        _write(root / SSHD_CONFIG.lstrip("/"), _sshd_config(host.address, host.port))
        _write(root / "root/.ssh/authorized_keys", self.client_public_key + "\n", 0o600)
        host._write_host_key()
        assert host.scenario is not None
        host.set_scenario(host.scenario)
        for path, read_only in self.binds.items():
            host.bind(path, read_only=read_only)
        host.process = host._spawn_sshd()

    def bind(self, path: Path | str, *, read_only: bool = False) -> None:
        """Bind-mount this machine's ``path`` into every host at the same absolute path.

        Hosts started later get it too. The mounts lie under the run directory,
        so :meth:`close` removes them with the rest.

        Args:
            path: an absolute path of a directory or file on this machine.
            read_only: whether the hosts see it read-only.

        Raises:
            HostsError: for a relative or missing path, or when a mount fails.
        """
        key = Path(path)
        self.binds[key] = read_only
        for host in self.hosts:
            if host.reachable:
                host.bind(key, read_only=read_only)

    def unbind(self, path: Path | str) -> None:
        """Undo :meth:`bind` in every host; hosts started later no longer get it."""
        key = Path(path)
        self.binds.pop(key, None)
        for host in self.hosts:
            if host.reachable:
                host.unbind(key)

    # ------------------------------------------------------------ outputs

    def known_hosts(self, path: Path | str) -> Path:
        """Write an OpenSSH known_hosts file with every reachable host's key."""
        lines = [f"{h.address},{h.name} {h.host_key_line}" for h in self.hosts if h.reachable]
        target = Path(path)
        _write(target, "".join(line + "\n" for line in lines))
        return target

    def write_inventory(
        self,
        path: Path | str,
        extra_vars: Mapping[str, object] | None = None,
        group: str = "gpu_nodes",
        simulate: bool = True,
    ) -> Path:
        """Write an Ansible INI inventory of every host in the pool.

        Args:
            path: the file to write.
            extra_vars: more ``[group:vars]`` entries.
            group: the inventory group holding the hosts.
            simulate: whether to set ``gpuready_simulate`` to the scenario file.
        """
        lines = [f"[{group}]"]
        for h in self.hosts:
            host_vars = {
                "ansible_host": h.address,
                "ansible_port": h.port,
                "ansible_user": h.user,
            }
            lines.append(h.name + "".join(f" {k}={v}" for k, v in host_vars.items()))
        group_vars: dict[str, object] = {
            "ansible_ssh_private_key_file": self.key_file,
            "ansible_python_interpreter": "/usr/bin/python3",
        }
        if simulate:
            group_vars["gpuready_simulate"] = SCENARIO_PATH
        group_vars.update(extra_vars or {})
        lines += ["", f"[{group}:vars]", *(f"{k}={v}" for k, v in group_vars.items())]
        target = Path(path)
        _write(target, "\n".join(lines) + "\n")
        return target

    def ssh_config(self, path: Path | str, known_hosts: Path | str | None = None) -> Path:
        """Write an OpenSSH client config: ``ssh -F PATH node01`` then just works."""
        known = Path(known_hosts) if known_hosts else Path(path).with_name("known_hosts")
        if known_hosts is None:
            self.known_hosts(known)
        blocks = [
            "\n".join(
                [
                    f"Host {h.name}",
                    f"  HostName {h.address}",
                    f"  Port {h.port}",
                    f"  User {h.user}",
                    f"  IdentityFile {self.key_file}",
                    "  IdentitiesOnly yes",
                    f"  UserKnownHostsFile {known}",
                    "  StrictHostKeyChecking yes",
                    "  ConnectTimeout 5",
                ]
            )
            for h in self.hosts
        ]
        target = Path(path)
        _write(target, "\n\n".join(blocks) + "\n")
        return target

    def sshd_memory_kib(self) -> int:
        """The proportional memory (PSS) of every process in the hosts, in KiB."""
        total = 0
        names = [h.netns for h in self.hosts if h.reachable]
        for pids in pids_in_netns(names).values():
            for pid in pids:
                with contextlib.suppress(OSError):
                    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                        if line.startswith("Pss:"):
                            total += int(line.split()[1])
        return total

    # ------------------------------------------------------------ teardown

    def close(self) -> None:
        """Tear everything down: processes, mounts, veths, namespaces, bridge, files.

        Safe to call twice, and from atexit.

        Raises:
            HostsError: when something would not go (named in the message).
        """
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(ValueError):
            atexit.unregister(self.close)
        if not self.slot:
            return
        try:
            problems = teardown_slot(self.slot, self.state_dir)
            for host in self.hosts:
                if host.process is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        host.process.wait(timeout=5)
                    host.process = None
        finally:
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None
        if problems:
            raise HostsError("test host teardown left: " + ", ".join(problems))


def _populate_dev(dev: Path) -> None:
    """A minimal /dev: the character devices sshd and Python use, plus a private devpts."""
    _mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=1m")
    # Bind the machine's own nodes: works without CAP_MKNOD and keeps their 0666 modes.
    for name in ("null", "zero", "full", "random", "urandom", "tty"):
        (dev / name).touch()
        _mount(f"/dev/{name}", dev / name, "none", MS_BIND)
    (dev / "pts").mkdir()
    # Everything in a test host runs as root, so root-only shm is enough.
    (dev / "shm").mkdir()
    _mount(
        "devpts",
        dev / "pts",
        "devpts",
        MS_NOSUID | MS_NOEXEC,
        "newinstance,ptmxmode=0666,mode=0620,gid=5",
    )
    os.symlink("pts/ptmx", dev / "ptmx")
    os.symlink("/proc/self/fd", dev / "fd")
    for number, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{number}", dev / name)
