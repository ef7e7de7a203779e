"""Write the report files (JSON, HTML, JUnit) as one set, or not at all.

Each is rendered in pieces straight into a temporary file in the target directory
(a fleet's page is never one string in memory) and fsynced; only when all three
are complete are they moved into place with ``os.replace``. A render error or a
full disk removes the temporary files and leaves the previous set in place. If a
move fails, the files already replaced are put back from hard-link backups, so a
reader sees the previous set or the new one, never a half-written file and never
a mix.

A fleet's report.json is the summary form by default (``JsonForm.AUTO``): each
node's full result is then written first, atomically, to ``hosts/<name>.json``
(the final judgement, fleet findings included, replacing the file written when
the host's result arrived), and the summary and the page's compact sections
point there. Each node that was not certified also gets ``hosts/<name>.html``, its
full section as a single-node report shows it (GPU table, burn-in and interconnect
charts, kernel log); report.html then holds a brief section for it (what did not
pass, what to do) linking there, so the page stays small at fleet size: a failing
node's charts are ~200 KB of HTML. A certified node's page from an earlier run,
when it failed, is removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path

from validator.errors import ReportError
from validator.files import (
    BACKUP_SUFFIX,
    create_temporary,
    fsync_directory,
    temporary_path,
    write_atomic,
)
from validator.model import Report, Verdict
from validator.report.common import is_fleet
from validator.report.html import html_chunks, render_html
from validator.report.json_report import JsonForm, json_chunks, resolve_form
from validator.report.junit import render_junit
from validator.report.partial import HOSTS_DIR, host_file_stem, write_host_result

JSON_NAME = "report.json"
HTML_NAME = "report.html"
JUNIT_NAME = "junit.xml"


# Pieces are gathered up to this size before a write: few system calls, little memory.
_BUFFER = 1 << 20


def _write_temp(directory: Path, name: str, chunks: Iterable[str]) -> Path:
    """Render ``chunks`` into a new temporary file beside ``directory / name``, fsynced.

    Raises:
        OSError, ReportError: writing or rendering failed; no temporary file is left.
    """
    fd, temporary = create_temporary(directory / name)
    try:
        with os.fdopen(fd, "wb", buffering=_BUFFER) as stream:
            for chunk in chunks:
                stream.write(chunk.encode("utf-8"))
            stream.flush()
            os.fsync(stream.fileno())
        # Reports are for sharing: 0644 (a temporary file starts as 0600).
        os.chmod(temporary, 0o644)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        raise
    return temporary


def result_file(hostname: str) -> str:
    """Where a host's full result is, relative to the report: ``hosts/<name>.json``."""
    return f"{HOSTS_DIR}/{host_file_stem(hostname)}.json"


def detail_file(hostname: str) -> str:
    """Where a failing host's full section is, relative to the report: ``hosts/<name>.html``."""
    return f"{HOSTS_DIR}/{host_file_stem(hostname)}.html"


def write_detail_pages(report: Report, directory: Path) -> None:
    """Each failing node's page (see the module's docstring); a certified node's, removed.

    Raises:
        ReportError: a page cannot be rendered or written.
    """
    for node in report.nodes:
        page = directory / detail_file(node.hostname)
        try:
            if node.verdict is Verdict.CERTIFIED:
                page.unlink(missing_ok=True)  # from a run it failed: it is not this one's
                continue
            alone = Report(
                generated_at=report.generated_at, tool_version=report.tool_version, nodes=(node,)
            )
            page.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(page, render_html(alone), mode=0o644)
        except OSError as exc:
            raise _unwritable(page, exc) from exc


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


def write_reports(
    report: Report,
    directory: str | os.PathLike[str],
    *,
    json_form: JsonForm | str = JsonForm.AUTO,
) -> dict[str, Path]:
    """Write report.json, report.html and junit.xml into ``directory``, all or nothing.

    Args:
        report: the acceptance report.
        directory: where to write; created (with parents) when missing.
        json_form: report.json's form; ``auto`` is full for one node and the
            summary for a fleet (with each host's full result in ``hosts/``).

    Returns:
        The written paths by format: ``{"json": ..., "html": ..., "junit": ...}``.

    Raises:
        ReportError: rendering failed, or the directory cannot be created or
            written; the message names the path and the fix. On error no
            temporary file is left and the previous reports are in place.
    """
    target_dir = Path(directory)
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(target_dir, exc) from exc
    form = resolve_form(report, json_form)
    linked: Callable[[str], str | None] | None = None
    detailed: Callable[[str], str | None] | None = None
    if form is JsonForm.SUMMARY:
        # The summary points at these files: they hold the final judgement first.
        for node in report.nodes:
            write_host_result(node, target_dir)
        linked = result_file
        if is_fleet(report):
            write_detail_pages(report, target_dir)
            detailed = detail_file
    pieces: dict[str, tuple[str, Callable[[], Iterable[str]]]] = {
        "json": (JSON_NAME, lambda: json_chunks(report, form, linked)),
        "html": (HTML_NAME, lambda: html_chunks(report, linked, detailed)),
        "junit": (JUNIT_NAME, lambda: [render_junit(report)]),
    }

    temps: dict[str, Path] = {}
    backups: dict[Path, Path | None] = {}
    replaced: list[Path] = []
    current = target_dir  # the file being written, for the message
    try:
        for key, (name, chunks) in pieces.items():
            current = target_dir / name
            temps[key] = _write_temp(target_dir, name, chunks())
        for key, (name, _) in pieces.items():
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
    return {key: target_dir / name for key, (name, _) in pieces.items()}


def _roll_back(replaced: list[Path], backups: dict[Path, Path | None]) -> None:
    """Put back what was there before for every file already replaced."""
    for target in reversed(replaced):
        backup = backups.get(target)
        with contextlib.suppress(OSError):
            if backup is None:
                target.unlink(missing_ok=True)
            else:
                os.replace(backup, target)
