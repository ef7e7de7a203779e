"""Bounds on every input, in one place, and the two readers that hold them.

Every file gpuready parses is bounded before it is parsed: a file larger than its
limit is refused (one line, exit 2), the kernel logs are read from their tail, and a
FIFO, a device (``/dev/zero``) or a directory given as an input is refused without
being read. The numbers leave real inputs far inside: the largest recorded
``nvidia-smi -q`` of the shared captures (ten A40s) is 95 KB, a real scenario a few KiB.

=========================  =================================================
kernel log                 the last :data:`KERNEL_LOG_TAIL_BYTES` (64 MiB)
                           of ``dmesg.txt`` / ``journalctl.txt``; the report
                           says when only the tail was read
Xid events, kernel faults  the latest :data:`KERNEL_LOG_EVENTS` of each kept
GPUs per node              :data:`GPUS_PER_NODE` (64) sections in any
                           nvidia-smi output; more is bad input
nvidia-smi ``-q``, XML     :data:`SMI_QUERY_BYTES` (16 MiB)
other tool outputs         :data:`TOOL_OUTPUT_BYTES` (4 MiB): banner, nvlink,
                           DCGM, nvbandwidth, nccl-tests, package lists, PCI
small files                :data:`SMALL_FILE_BYTES` (1 MiB): meta.json,
                           hostname, os-release, versions, cuDNN header
telemetry CSV              :data:`TELEMETRY_CSV_ROWS` rows of at most
                           :data:`LINE_BYTES`, streamed (never read whole)
policy, catalog            :data:`DOCUMENT_BYTES` (4 MiB)
scenario                   :data:`SCENARIO_BYTES` (16 MiB)
certificate                :data:`CERTIFICATE_BYTES` (16 MiB)
inventory file             :data:`INVENTORY_BYTES` (16 MiB), and a Slurm
                           spool's ``request.json``
a node agent's output      :data:`AGENT_OUTPUT_BYTES` (256 MiB) from SSH,
                           Ansible or a Slurm spool, and what its packed
                           facts unpack to
YAML aliases, nesting      a document is refused when its aliases expand it
                           past :data:`YAML_EXPANDED_VALUES` (1,000,000) values,
                           or it nests deeper than :data:`YAML_DEPTH` (100)
=========================  =================================================

Standard library only, Python 3.9: the node agent ships with this module.
"""

from __future__ import annotations

import os
import stat

MIB = 1 << 20

KERNEL_LOG_TAIL_BYTES = 64 * MIB
KERNEL_LOG_EVENTS = 10_000
GPUS_PER_NODE = 64
SMI_QUERY_BYTES = 16 * MIB
TOOL_OUTPUT_BYTES = 4 * MIB
SMALL_FILE_BYTES = 1 * MIB
TELEMETRY_CSV_ROWS = 20_000
LINE_BYTES = 64 << 10
DOCUMENT_BYTES = 4 * MIB
SCENARIO_BYTES = 16 * MIB
CERTIFICATE_BYTES = 16 * MIB
INVENTORY_BYTES = 16 * MIB
# A default burn's facts are ~500 KB of JSON (8 GPUs, 300 samples each), an hour's ~6 MB.
AGENT_OUTPUT_BYTES = 256 * MIB
YAML_EXPANDED_VALUES = 1_000_000
# Real policies and inventories nest a few levels; Python's own recursion limit (1,000)
# is where 3.11's loader happened to stop, and 3.9's did not.
YAML_DEPTH = 100

_CHUNK = 1 * MIB
# What a path that is no regular file is, in the words of the message.
_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


class OverLimitError(ValueError):
    """An input over its bound, or no regular file; the message says which, not the fix.

    Callers put the path and the fix around it (each room raises its own error kind).

    Attributes:
        too_large: the input holds more than its bound (not: it is no regular file).
    """

    def __init__(self, message: str, *, too_large: bool = True) -> None:
        super().__init__(message)
        self.too_large = too_large


def size_text(size: int) -> str:
    """``16 MiB``, ``2.0 GiB``, ``300 bytes``: a size as a message shows it."""
    if size >= 1 << 30:
        return f"{size / (1 << 30):.1f} GiB"
    if size >= MIB:
        whole, part = divmod(size, MIB)
        return f"{whole} MiB" if part == 0 else f"{size / MIB:.1f} MiB"
    if size >= 1024:
        return f"{size / 1024:.1f} KiB"
    return f"{size} bytes"


def _open_regular(
    path: str | os.PathLike[str], *, nofollow: bool = False
) -> tuple[int, os.stat_result]:
    """An open descriptor of ``path``, refused unless it is a regular file.

    O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
    ``nofollow``: a symbolic link as the last component fails (OSError, ELOOP).

    Raises:
        OSError: it cannot be opened.
        OverLimitError: it is a FIFO, a device, a socket or a directory.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    if nofollow:
        flags |= os.O_NOFOLLOW
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        for test, kind in _KINDS:
            if test(info.st_mode):
                raise OverLimitError(f"is {kind}, not a regular file", too_large=False)
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def _read_upto(fd: int, count: int) -> bytes:
    """At most ``count`` bytes from ``fd`` (fewer at the end of the file)."""
    parts: list[bytes] = []
    left = count
    while left > 0:
        chunk = os.read(fd, min(left, _CHUNK))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def read_bounded(
    path: str | os.PathLike[str], max_bytes: int, *, nofollow: bool = False
) -> bytes:
    """A regular file's bytes, refused when it holds more than ``max_bytes``.

    The size the file reports is checked first (a sparse file of terabytes is refused
    before a byte is read), and the read stops one byte past the bound (a file that
    grows, or one of /proc that reports size 0, cannot make it read more).

    Raises:
        OSError: it cannot be opened or read.
        OverLimitError: it is larger than ``max_bytes``, or no regular file.
    """
    fd, info = _open_regular(path, nofollow=nofollow)
    try:
        if info.st_size > max_bytes:
            raise OverLimitError(
                f"is {size_text(info.st_size)}, larger than the {size_text(max_bytes)} it may be"
            )
        data = _read_upto(fd, max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise OverLimitError(f"is larger than the {size_text(max_bytes)} it may be")
    return data


def read_head(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """At most ``max_bytes`` + 1 bytes from a regular file's start, never the rest.

    One byte past the bound tells the caller the file is larger.

    Raises:
        OSError: it cannot be opened or read.
        OverLimitError: it is no regular file.
    """
    fd, _ = _open_regular(path)
    try:
        return _read_upto(fd, max_bytes + 1)
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike[str], max_bytes: int) -> str:
    """A regular file's UTF-8 text, bounded as :func:`read_bounded` bounds its bytes.

    Raises:
        OSError: it cannot be opened or read.
        OverLimitError: it is larger than ``max_bytes``, or no regular file.
        UnicodeDecodeError: it is not UTF-8.
    """
    return read_bounded(path, max_bytes).decode("utf-8")


def read_tail(
    path: str | os.PathLike[str], max_bytes: int, *, nofollow: bool = False
) -> tuple[bytes, int]:
    """The last ``max_bytes`` of a regular file, from its first whole line on.

    Returns:
        The bytes read, and the file's size when only its tail was read (0 when the
        whole file was).

    Raises:
        OSError: it cannot be opened or read.
        OverLimitError: it is no regular file.
    """
    fd, info = _open_regular(path, nofollow=nofollow)
    try:
        size = info.st_size
        if size <= max_bytes:
            data = _read_upto(fd, max_bytes + 1)
            if len(data) <= max_bytes:
                return data, 0
            size = max(size, len(data))  # it grew while read: read its tail
        os.lseek(fd, size - max_bytes, os.SEEK_SET)
        data = _read_upto(fd, max_bytes)
    finally:
        os.close(fd)
    newline = data.find(b"\n")
    # The first line was cut by the seek; a tail of one endless line keeps nothing.
    return (data[newline + 1 :] if newline >= 0 else b""), size


def read_lines(
    path: str | os.PathLike[str], max_lines: int, max_line: int = LINE_BYTES
) -> list[str]:
    """A regular text file's lines (UTF-8), streamed: never more than the bounds in memory.

    Args:
        path: the file.
        max_lines: the most lines it may hold (blank ones count).
        max_line: the most characters one line may hold.

    Returns:
        The lines, without their line ends.

    Raises:
        OSError: it cannot be opened or read.
        OverLimitError: more lines, or a longer line, than the bounds; no regular file.
        UnicodeDecodeError: it is not UTF-8.
    """
    fd, _ = _open_regular(path)
    lines: list[str] = []
    with open(fd, encoding="utf-8", newline="") as stream:
        while True:
            line = stream.readline(max_line + 2)  # room for "\r\n"
            if not line:
                break
            body = line.rstrip("\r\n")
            if len(body) > max_line:
                raise OverLimitError(f"line {len(lines) + 1} is longer than {max_line} characters")
            if len(lines) >= max_lines:
                raise OverLimitError(f"holds more than {max_lines} lines")
            lines.append(body)
    return lines


__all__ = [
    "AGENT_OUTPUT_BYTES",
    "CERTIFICATE_BYTES",
    "DOCUMENT_BYTES",
    "GPUS_PER_NODE",
    "INVENTORY_BYTES",
    "KERNEL_LOG_EVENTS",
    "KERNEL_LOG_TAIL_BYTES",
    "LINE_BYTES",
    "MIB",
    "SCENARIO_BYTES",
    "SMALL_FILE_BYTES",
    "SMI_QUERY_BYTES",
    "TELEMETRY_CSV_ROWS",
    "TOOL_OUTPUT_BYTES",
    "YAML_DEPTH",
    "YAML_EXPANDED_VALUES",
    "OverLimitError",
    "read_bounded",
    "read_head",
    "read_lines",
    "read_tail",
    "read_text",
    "size_text",
]
