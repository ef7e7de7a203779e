"""Writing a file so that it is either whole or absent: nothing measured is half-written.

Standard library only: the node agent ships with this module.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Make renames in ``directory`` durable (some filesystems cannot open a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *, mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same directory and a rename.

    A reader sees the old file or the new one, never a part; a failed write
    removes its temporary file and raises.

    Args:
        path: the file to (re)place.
        data: text (written as UTF-8) or bytes.
        mode: the file's permissions (a temporary file starts as 0600).

    Returns:
        The path written.

    Raises:
        OSError: the directory cannot be written (read-only, full, missing).
    """
    target = Path(path)
    handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed below, kept on success
        mode="wb", dir=target.parent, prefix=f".{target.name}.", suffix=".tmp", delete=False
    )
    temporary = Path(handle.name)
    try:
        with handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    fsync_directory(target.parent)
    return target


__all__ = ["fsync_directory", "write_atomic"]
