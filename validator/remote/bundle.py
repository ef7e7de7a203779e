"""The node agent as one file: a zipapp of validator/node plus pynvml, named by its hash.

Built at run time from the installed package, byte-for-byte reproducible (fixed
timestamps, sorted entries), so the same code gives the same hash and a host
that already holds it is not sent it again.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path

from validator.error_tree import CouldNotRunError
from validator.files import write_atomic

# Checked before anything else is imported, in syntax every Python 3 parses,
# so an old interpreter gets one line instead of a SyntaxError. Then the zip is
# unpacked once beside itself: imports from a directory are cached as bytecode,
# imports from a zip are compiled again on every run (about 0.1 s of a 0.2 s
# agent run, which adds up on 64 hosts sharing a machine, or on a busy node).
MAIN = """import os
import shutil
import sys
import zipfile

if sys.version_info < (3, 9):
    sys.stderr.write("gpuready-agent: error: Python %d.%d is too old; "
                     "the agent needs 3.9 or newer\\n" % sys.version_info[:2])
    sys.exit(3)

def _unpacked():
    archive = os.path.abspath(sys.argv[0])
    if not zipfile.is_zipfile(archive):
        return None
    target = archive[:-4] if archive.endswith(".pyz") else archive + ".d"
    if not os.path.isdir(os.path.join(target, "validator")):
        temporary = "%s.%d.tmp" % (target, os.getpid())
        try:
            with zipfile.ZipFile(archive) as bundle:
                bundle.extractall(temporary)
            os.rename(temporary, target)
        except OSError:
            shutil.rmtree(temporary, ignore_errors=True)  # lost a race, or read-only: use the zip
    return target if os.path.isdir(os.path.join(target, "validator")) else None

_here = _unpacked()
if _here:
    sys.path.insert(0, _here)
from validator.node.agent import main
main()
"""
_FIXED_TIME = (2020, 1, 1, 0, 0, 0)
_PACKAGE_FILES = (
    "validator/__init__.py",
    "validator/error_tree.py",
    "validator/safe_text.py",
    "validator/files.py",
    "validator/fields.py",
    "validator/codec.py",
    "validator/limits.py",
)
# Shipped whole: the model's package, and the agent's with its scenarios and their traces.
_PACKAGES = ("validator/model", "validator/node")


@dataclass(frozen=True)
class AgentBundle:
    """The zipapp's bytes and the name hosts cache it under."""

    data: bytes
    sha256: str

    @property
    def filename(self) -> str:
        """``gpuready-agent-<first 16 hex digits of the hash>.pyz``."""
        return f"gpuready-agent-{self.sha256[:16]}.pyz"


def _package_root() -> Path:
    import validator

    return Path(validator.__file__).resolve().parent.parent


def _pynvml_file() -> Path | None:
    spec = importlib.util.find_spec("pynvml")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin)


def _entries(root: Path) -> list[tuple[str, bytes]]:
    entries = [(name, (root / name).read_bytes()) for name in _PACKAGE_FILES]
    for package in _PACKAGES:
        for path in sorted((root / package).rglob("*")):
            shipped = path.suffix in (".py", ".json", ".csv")  # code, scenarios, their traces
            if path.is_file() and shipped and "__pycache__" not in path.parts:
                entries.append((path.relative_to(root).as_posix(), path.read_bytes()))
    pynvml = _pynvml_file()
    if pynvml is not None:
        entries.append(("pynvml.py", pynvml.read_bytes()))
    entries.append(("__main__.py", MAIN.encode()))
    return sorted(entries)


# The fan-out's workers all ask for the agent in their first moment; lru_cache
# alone lets every concurrent first caller build it (17-24 builds per 64 hosts).
_BUILT: list[AgentBundle] = []
_BUILD_LOCK = threading.Lock()


def build_agent() -> AgentBundle:
    """The agent zipapp of the running code: built once per process, however many threads ask.

    Raises:
        CouldNotRunError: the package's files cannot be read (asked again next time).
    """
    if _BUILT:
        return _BUILT[0]
    with _BUILD_LOCK:
        if not _BUILT:
            _BUILT.append(_build())
        return _BUILT[0]


def clear_agent_cache() -> None:
    """Forget the built agent, so the next call builds it again (tests that change the code)."""
    with _BUILD_LOCK:
        _BUILT.clear()


def _build() -> AgentBundle:
    try:
        entries = _entries(_package_root())
    except OSError as exc:
        raise CouldNotRunError(f"cannot build the node agent: {exc}; reinstall gpuready") from None
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    data = buffer.getvalue()
    return AgentBundle(data=data, sha256=hashlib.sha256(data).hexdigest())


def write_agent(directory: Path) -> Path:
    """Write the agent into ``directory`` under its hashed name; return its path."""
    bundle = build_agent()
    target = directory / bundle.filename
    if not target.exists():
        write_atomic(target, bundle.data)
    return target
