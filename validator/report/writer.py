"""Write the report files (JSON, HTML, JUnit) as one set, or not at all.

All three are rendered before anything touches the disk. Each is written to a
temporary file in the target directory and fsynced; only then are they moved
into place with ``os.replace``. If a move fails, the files already replaced are
put back from hard-link backups, so a reader sees the previous set or the new one,
never a half-written file and never a mix.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from validator.errors import ReportError
from validator.files import BACKUP_SUFFIX, fsync_directory, temporary_path, write_temporary
from validator.model import Report
from validator.report.html import render_html
from validator.report.json_report import render_json
from validator.report.junit import render_junit

JSON_NAME = "report.json"
HTML_NAME = "report.html"
JUNIT_NAME = "junit.xml"


def _write_temp(directory: Path, name: str, text: str) -> Path:
    # Reports are for sharing: 0644 (a temporary file starts as 0600).
    return write_temporary(directory / name, text.encode("utf-8"), 0o644)


def _backup(target: Path) -> Path | None:
    """Keep the current ``target`` reachable under a temporary name (None: there is none)."""
    if not target.exists():
        return None
    # Named as a temporary file of this process, so the next run removes it if we die.
    backup = temporary_path(target, BACKUP_SUFFIX)
    try:
        os.link(target, backup)
    except OSError:
        # Filesystems without hard links: a copy does the same job.
        try:
            shutil.copy2(target, backup)
        except BaseException:
            backup.unlink(missing_ok=True)
            raise
    return backup


def _unwritable(path: Path, exc: OSError) -> ReportError:
    reason = exc.strerror or type(exc).__name__
    return ReportError(
        f"cannot write {path}: {reason}; "
        "choose a writable output directory (or free space) and run again"
    )


def write_reports(report: Report, directory: str | os.PathLike[str]) -> dict[str, Path]:
    """Write report.json, report.html and junit.xml into ``directory``, all or nothing.

    Args:
        report: the acceptance report.
        directory: where to write; created (with parents) when missing.

    Returns:
        The written paths by format: ``{"json": ..., "html": ..., "junit": ...}``.

    Raises:
        ReportError: rendering failed, or the directory cannot be created or
            written; the message names the path and the fix. On error no
            temporary file is left and the previous reports are in place.
    """
    texts = {
        "json": (JSON_NAME, render_json(report)),
        "html": (HTML_NAME, render_html(report)),
        "junit": (JUNIT_NAME, render_junit(report)),
    }
    target_dir = Path(directory)
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(target_dir, exc) from exc

    temps: dict[str, Path] = {}
    backups: dict[Path, Path | None] = {}
    replaced: list[Path] = []
    current = target_dir  # the file being written, for the message
    try:
        for key, (name, text) in texts.items():
            current = target_dir / name
            temps[key] = _write_temp(target_dir, name, text)
        for key, (name, _) in texts.items():
            current = target = target_dir / name
            backups[target] = _backup(target)
            os.replace(temps[key], target)
            replaced.append(target)
    except BaseException as exc:
        _roll_back(replaced, backups)
        if isinstance(exc, OSError):
            raise _unwritable(current, exc) from exc
        raise
    finally:
        for temp in temps.values():
            with contextlib.suppress(OSError):
                temp.unlink(missing_ok=True)
        for backup in backups.values():
            if backup is not None:
                with contextlib.suppress(OSError):
                    backup.unlink(missing_ok=True)
    fsync_directory(target_dir)
    return {key: target_dir / name for key, (name, _) in texts.items()}


def _roll_back(replaced: list[Path], backups: dict[Path, Path | None]) -> None:
    """Put back what was there before for every file already replaced."""
    for target in reversed(replaced):
        backup = backups.get(target)
        with contextlib.suppress(OSError):
            if backup is None:
                target.unlink(missing_ok=True)
            else:
                os.replace(backup, target)
