"""Each host's result on disk as soon as it arrives, so a run cut short loses nothing.

A host's name becomes a file name one to one: every byte outside
``[A-Za-z0-9.-]`` (and ``_`` itself, and a leading dot) is written ``_XX`` in
hex, so ``gpu-01`` stays ``gpu-01.json`` while ``gpu@01`` (``gpu_4001.json``)
and ``gpu_01`` (``gpu_5F01.json``) never share a file.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from validator.error_tree import ReportError
from validator.files import write_atomic
from validator.model import NodeResult
from validator.packed import result_json

HOSTS_DIR = "hosts"
CERTIFICATES_DIR = "certificates"

_PLAIN = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-")
# A file name is at most 255 bytes: a longer escaped name keeps its start and a
# digest of the whole name ("~" is never produced by the escaping).
_LONGEST = 200


def safe_stem(text: str, *, dash: bool = True, longest: int = _LONGEST) -> str:
    """``text`` as a file-name part, one to one: see the module's docstring.

    Args:
        text: any string (a host name, a serial number a device reported).
        dash: keep ``-`` as is; False writes it ``_2D`` too, so a name can join parts
            with ``-`` and still be split back (see validator.report.rma).
        longest: a longer escaped part keeps its start and a digest of the whole text.
    """
    plain = _PLAIN if dash else _PLAIN - {ord("-")}
    raw = text.encode("utf-8", "surrogatepass")
    stem = "".join(
        chr(byte) if byte in plain and not (position == 0 and byte == ord(".")) else f"_{byte:02X}"
        for position, byte in enumerate(raw)
    )
    if not stem:
        return "_"  # never produced otherwise: every "_" is followed by two hex digits
    if len(stem) > longest:
        digest = hashlib.sha256(raw).hexdigest()[:32]
        stem = f"{stem[: longest - 33]}~{digest}"
    return stem


def host_file_stem(hostname: str) -> str:
    """The file name (without ``.json``) of a host: readable for plain names, one to one."""
    return safe_stem(hostname)


def host_result_path(directory: str | os.PathLike[str], hostname: str) -> Path:
    """``DIR/hosts/<name>.json``, the name escaped by :func:`host_file_stem`."""
    return Path(directory) / HOSTS_DIR / f"{host_file_stem(hostname)}.json"


def certificate_path(directory: str | os.PathLike[str], hostname: str) -> Path:
    """``DIR/certificates/<name>.json``, the name escaped by :func:`host_file_stem`."""
    return Path(directory) / CERTIFICATES_DIR / f"{host_file_stem(hostname)}.json"


def write_host_result(result: NodeResult, directory: str | os.PathLike[str]) -> Path:
    """Write one host's result atomically (temp file, fsync, rename).

    Raises:
        ReportError: the directory cannot be written; no temporary file is left.
        UnsafePathError: the report folder, hosts/ or the file is a link (or the wrong kind).
        ValueError: a number in the result is not finite (JSON has none; from_dict
            refuses them in every result read, so only a bug here can make one).
    """
    target = host_result_path(directory, result.hostname)
    # The texts the history store keeps, joined (validator.packed): a fleet writes every
    # host twice, on arrival and after the fleet judgement, and encoding a result
    # costs more than judging it.
    text = result_json(result) + "\n"
    try:
        # 0644 like report.json and report.html, which link to it: whoever reads them reads this.
        # The report folder and hosts/ are ours: made when missing, never through a link.
        write_atomic(target, text, mode=0o644, start=directory)
    except OSError as exc:
        raise ReportError(
            f"cannot write {target}: {exc.strerror or exc}; free space or choose a writable "
            "--report-dir"
        ) from None
    return target


def remove_certificates(
    directory: str | os.PathLike[str], hostnames: Iterable[str]
) -> list[Path]:
    """Remove ``DIR/certificates/`` files of hosts a run did not certify (their names in any case).

    A folder that keeps an older certificate of a host whose latest certification
    failed would hand verify-cert (and ``drift --certificate``) a verdict the host no
    longer holds. Host names are case-insensitive, so ``GPU01.json`` goes with ``gpu01``.
    Nothing is followed: the folders are opened by descriptor from ``directory`` down,
    and only regular files are removed (validator.files.Folder).

    Returns:
        The files removed.

    Raises:
        ReportError: the folder or a file could not be read or removed.
        UnsafePathError: certificates/ or a certificate's name is a link (or not a file):
            left in place.
    """
    from validator.files import Folder

    root = Path(directory)
    wanted = {f"{host_file_stem(name)}.json".lower() for name in hostnames}
    removed: list[Path] = []
    if not wanted:
        return removed
    try:
        folder = Folder.open(root / CERTIFICATES_DIR, create=False, start=root)
    except FileNotFoundError:
        return removed
    except OSError as exc:
        raise ReportError(
            f"cannot open {root / CERTIFICATES_DIR} to remove the certificates of the hosts "
            f"this run did not certify: {exc.strerror or exc}; remove them by hand"
        ) from None
    with folder:
        try:
            for name in folder.names():
                if name.lower() in wanted and folder.remove(name):
                    removed.append(folder.path / name)
        except OSError as exc:
            raise ReportError(
                f"cannot remove a certificate in {folder.path} of a host this run did not "
                f"certify: {exc.strerror or exc}; remove it by hand"
            ) from None
        if removed:
            folder.sync()
    return removed
