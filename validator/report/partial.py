"""Each host's result on disk as soon as it arrives, so a run cut short loses nothing."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from validator.errors import ReportError
from validator.files import write_atomic
from validator.model import NodeResult, to_dict

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def host_result_path(directory: str | os.PathLike[str], hostname: str) -> Path:
    """``DIR/hosts/<name>.json``, the name reduced to characters safe in a file name."""
    safe = _UNSAFE.sub("_", hostname).lstrip(".") or "_"
    return Path(directory) / "hosts" / f"{safe}.json"


def write_host_result(result: NodeResult, directory: str | os.PathLike[str]) -> Path:
    """Write one host's result atomically (temp file, fsync, rename).

    Raises:
        ReportError: the directory cannot be written.
    """
    target = host_result_path(directory, result.hostname)
    text = json.dumps(to_dict(result), indent=2, allow_nan=False) + "\n"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # 0600 as before (mkstemp's mode); report.json, report.html and junit.xml are 0644.
        write_atomic(target, text, mode=0o600)
    except OSError as exc:
        raise ReportError(
            f"cannot write {target}: {exc.strerror or exc}; choose a writable --report-dir"
        ) from None
    return target
