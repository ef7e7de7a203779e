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

from validator.error_tree import ReportError
from validator.files import BACKUP_SUFFIX, Folder, temporary_path, write_atomic
from validator.model import Report, Verdict
from validator.report.html import html_chunks, render_html
from validator.report.json_report import JsonForm, json_chunks, resolve_form
from validator.report.junit import render_junit
from validator.report.partial import HOSTS_DIR, host_file_stem, write_host_result
from validator.report.shared import is_fleet

JSON_NAME = "report.json"
HTML_NAME = "report.html"
JUNIT_NAME = "junit.xml"


# Pieces are gathered up to this size before a write: few system calls, little memory.
_BUFFER = 1 << 20


def _write_temp(folder: Folder, name: str, chunks: Iterable[str]) -> str:
    """Render ``chunks`` into a new temporary file beside ``name`` in ``folder``, fsynced.

    Returns:
        The temporary file's name in ``folder``.

    Raises:
        OSError, ReportError: writing or rendering failed; no temporary file is left.
    """
    fd, temporary = folder.create_temporary(name)
    try:
        with os.fdopen(fd, "wb", buffering=_BUFFER) as stream:
            for chunk in chunks:
                stream.write(chunk.encode("utf-8"))
            stream.flush()
            # Reports are for sharing: 0644 (a temporary file starts as 0600).
            os.fchmod(stream.fileno(), 0o644)
            os.fsync(stream.fileno())
    except BaseException:
        folder.remove_quietly(temporary)
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
        UnsafePathError: ``hosts/`` or a page is a link (or not a folder, not a file).
    """
    for node in report.nodes:
        page = directory / detail_file(node.hostname)
        try:
            if node.verdict is Verdict.CERTIFIED:
                _remove_page(page, directory)  # from a run it failed: it is not this one's
                continue
            alone = Report(
                generated_at=report.generated_at, tool_version=report.tool_version, nodes=(node,)
            )
            write_atomic(page, render_html(alone), mode=0o644, start=directory)
        except OSError as exc:
            raise _unwritable(page, exc) from exc


def _remove_page(page: Path, directory: Path) -> None:
    try:
        hosts = Folder.open(page.parent, create=False, start=directory)
    except FileNotFoundError:
        return  # no hosts/ folder: no page
    with hosts:
        hosts.remove(page.name)


def _backup(folder: Folder, name: str) -> str | None:
    """Keep the current ``name`` reachable under a temporary name (None: there is none)."""
    if not folder.check_file(name):
        return None
    # Named as a temporary file of this process, so the next run removes it if we die.
    backup = temporary_path(name, BACKUP_SUFFIX).name
    try:
        os.link(name, backup, src_dir_fd=folder.fd, dst_dir_fd=folder.fd, follow_symlinks=False)
    except OSError:
        # Filesystems without hard links: a copy does the same job.
        source = folder.open_read(name)
        try:
            made = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            copy = os.open(backup, made, 0o600, dir_fd=folder.fd)
            with os.fdopen(source, "rb") as reader, os.fdopen(copy, "wb") as writer:
                source = -1
                shutil.copyfileobj(reader, writer)
        except BaseException:
            if source >= 0:
                os.close(source)
            folder.remove_quietly(backup)
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
        # The folder named is ours from itself down: a link there is refused, never followed.
        folder = Folder.open(target_dir)
    except OSError as exc:
        raise _unwritable(target_dir, exc) from exc
    with folder:
        return _write_set(report, folder, resolve_form(report, json_form))


def _write_set(report: Report, folder: Folder, form: JsonForm) -> dict[str, Path]:
    target_dir = folder.path
    linked: Callable[[str], str | None] | None = None
    detailed: Callable[[str], str | None] | None = None
    for name in (JSON_NAME, HTML_NAME, JUNIT_NAME):
        folder.check_file(name)  # before anything is written: the set stays whole
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

    temps: dict[str, str] = {}
    backups: dict[str, str | None] = {}
    replaced: list[str] = []
    current = target_dir  # the file being written, for the message
    try:
        for key, (name, chunks) in pieces.items():
            current = target_dir / name
            temps[key] = _write_temp(folder, name, chunks())
        for key, (name, _) in pieces.items():
            current = target_dir / name
            backups[name] = _backup(folder, name)
            folder.replace(temps[key], name)
            replaced.append(name)
    except BaseException as exc:
        _roll_back(folder, replaced, backups)
        if isinstance(exc, OSError):
            raise _unwritable(current, exc) from exc
        raise
    finally:
        for temp in temps.values():
            folder.remove_quietly(temp)
        for backup in backups.values():
            if backup is not None:
                folder.remove_quietly(backup)
    folder.sync()
    return {key: target_dir / name for key, (name, _) in pieces.items()}


def _roll_back(folder: Folder, replaced: list[str], backups: dict[str, str | None]) -> None:
    """Put back what was there before for every file already replaced."""
    for name in reversed(replaced):
        backup = backups.get(name)
        with contextlib.suppress(OSError):
            if backup is None:
                os.unlink(name, dir_fd=folder.fd)
            else:
                os.replace(backup, name, src_dir_fd=folder.fd, dst_dir_fd=folder.fd)
