"""Refusing a report folder that cannot be written, before anything is measured."""

from __future__ import annotations

import errno
from pathlib import Path

from validator.error_tree import BadInputError


def check_writable(directory: str) -> None:
    """Refuse a report directory that cannot be written, naming it and the fix.

    Nothing is created: the folder itself (or the nearest one of its parents that
    exists, where it would be made) must take a file. Bad input found later then
    leaves no empty folder behind.

    Raises:
        BadInputError: a file is in the way, or no file can be written there.
    """
    import tempfile

    target = Path(directory)
    existing = next((folder for folder in (target, *target.parents) if folder.exists()), None)
    try:
        if existing is None or not existing.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, f"{existing} is not a directory")
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as exc:
        raise BadInputError(
            f"--report-dir {directory} cannot be written ({exc.strerror or exc}); give a "
            "writable directory"
        ) from None
