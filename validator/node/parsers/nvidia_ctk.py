"""The NVIDIA Container Toolkit's outputs and the container runtimes' GPU settings.

Pure parsers, text in, model out; each raises :class:`ParseError` on text that is not
what it reads. Shapes (real ones in tests/fixtures/nvidia-ctk, with their sources):

``nvidia-ctk cdi list``: a log line, then one fully-qualified CDI device name a line::

    INFO[0000] Found 17 CDI devices
    nvidia.com/gpu=0
    ...
    nvidia.com/gpu=GPU-20f8adb6-f7e2-5466-6cf5-d07abfe364a9
    nvidia.com/gpu=all

(toolkits before 1.17 list indexes and ``all`` only). ``nvidia-ctk --version``:
``NVIDIA Container Toolkit CLI version 1.12.0`` then ``commit: ...``. docker's
``/etc/docker/daemon.json`` (JSON: ``runtimes.nvidia``, ``features.cdi``), containerd's
``/etc/containerd/config.toml`` (TOML: a ``runtimes.nvidia`` table, or ``enable_cdi``),
and ``nvidia-smi -L`` as a container prints it (``GPU 0: NAME (UUID: GPU-...)``).
"""

from __future__ import annotations

import json
import re

from validator.limits import SMALL_FILE_BYTES, TOOL_OUTPUT_BYTES
from validator.model import CdiSpec
from validator.node.parsers.base import ParseError

GPU_KIND = "nvidia.com/gpu"
# What a CDI device name is: vendor.tld/class=name (the CDI spec's qualified name).
_DEVICE = re.compile(r"^([a-z0-9][a-z0-9.-]*/[a-zA-Z0-9][a-zA-Z0-9_.-]*)=([A-Za-z0-9_.:*-]+)$")
# A logrus line the toolkit prints before the list: INFO[0000] ..., WARN[0000] ...
_LOG = re.compile(r"^(?:INFO|WARN|WARNING|ERRO|ERROR|DEBU|DEBUG|TRAC|FATA)\[\d+\]\s")
_FOUND = re.compile(r"\bFound (\d{1,6}) CDI devices?\b")
_UUID = re.compile(r"^GPU-[0-9A-Fa-f]{8}(?:-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}$")
_INDEX = re.compile(r"^[0-9]{1,3}$")
_CTK_VERSION = re.compile(r"^NVIDIA Container Toolkit CLI version\s+v?(\d+\.\d+(?:\.\d+)?\S*)\s*$")
_SMI_GPU = re.compile(r"^GPU\s+(\d{1,3}):\s*.*?\(UUID:\s*(GPU-[0-9A-Fa-f-]{36})\)\s*$")
# containerd: a runtime table named nvidia (CRI v1 or v2 plugin ids), or CDI switched on.
_TOML_TABLE = re.compile(r"^\s*\[\s*(.+?)\s*\]\s*(?:#.*)?$")
_NVIDIA_RUNTIME = re.compile(r"\.runtimes\.\"?nvidia\"?$")
_ENABLE_CDI = re.compile(r"^\s*enable_cdi\s*=\s*true\s*(?:#.*)?$")


def _bounded(text: str, limit: int, what: str) -> str:
    if len(text) > limit:
        raise ParseError(f"{what} is {len(text)} characters, more than the {limit} read")
    return text


def parse_cdi_list(text: str) -> CdiSpec:
    """The GPUs ``nvidia-ctk cdi list`` names.

    Raises:
        ParseError: a line that is neither a log line nor a CDI device name, or fewer
            names than its "Found N CDI devices" line says (a list cut short).
    """
    devices: list[str] = []
    found: int | None = None
    for raw in _bounded(text, TOOL_OUTPUT_BYTES, "nvidia-ctk cdi list").splitlines():
        line = raw.strip()
        if not line:
            continue
        if _LOG.match(line):
            count = _FOUND.search(line)
            found = int(count.group(1)) if count else found
            continue
        if not _DEVICE.match(line):
            raise ParseError(f"nvidia-ctk cdi list: not a CDI device name: {line[:80]!r}")
        devices.append(line)
    if found is None and not devices:
        raise ParseError("nvidia-ctk cdi list: no device and no 'Found N CDI devices' line")
    if found is not None and len(devices) < found:
        raise ParseError(
            f"nvidia-ctk cdi list: says it found {found} CDI devices but lists {len(devices)}"
        )
    indexes, uuids, has_all = [], [], False
    for device in devices:
        kind, _, name = device.partition("=")
        if kind != GPU_KIND:
            continue
        if name == "all":
            has_all = True
        elif _INDEX.match(name):
            indexes.append(int(name))
        elif _UUID.match(name):
            uuids.append(name)
    return CdiSpec(
        indexes=tuple(sorted(set(indexes))),
        uuids=tuple(sorted(set(uuids))),
        has_all=has_all,
        devices=tuple(devices),
    )


def parse_ctk_version(text: str) -> str:
    """The toolkit's version from ``nvidia-ctk --version`` ("1.12.0").

    Raises:
        ParseError: no "NVIDIA Container Toolkit CLI version" line.
    """
    for line in _bounded(text, SMALL_FILE_BYTES, "nvidia-ctk --version").splitlines():
        match = _CTK_VERSION.match(line.strip())
        if match:
            return match.group(1)
    raise ParseError("nvidia-ctk --version: no 'NVIDIA Container Toolkit CLI version' line")


def parse_daemon_json(text: str) -> tuple[bool, str, bool]:
    """Whether docker's daemon.json sets docker up for the GPUs: (configured, how, cdi).

    Configured: an ``nvidia`` runtime (``nvidia-ctk runtime configure``'s) or CDI
    switched on (``features.cdi``). ``how`` names the keys found. An empty file is
    docker's defaults: not configured.

    Raises:
        ParseError: not JSON, or not a JSON object.
    """
    if not _bounded(text, SMALL_FILE_BYTES, "daemon.json").strip():
        return False, "", False
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ParseError(f"daemon.json is not JSON: {exc}") from None
    except RecursionError:  # nested deeper than the parser's stack
        raise ParseError("daemon.json is nested too deep to be a docker config") from None
    if not isinstance(data, dict):
        raise ParseError("daemon.json is not a JSON object")
    runtimes = data.get("runtimes")
    features = data.get("features")
    nvidia = isinstance(runtimes, dict) and "nvidia" in runtimes
    cdi = isinstance(features, dict) and features.get("cdi") is True
    how = [name for name, seen in (("runtimes.nvidia", nvidia), ("features.cdi", cdi)) if seen]
    if data.get("default-runtime") == "nvidia" and nvidia:
        how.append("default-runtime nvidia")
    return nvidia or cdi, ", ".join(how), cdi


def parse_containerd_toml(text: str) -> tuple[bool, str, bool]:
    """Whether containerd's config.toml sets it up for the GPUs: (configured, how, cdi).

    Configured: a ``...runtimes.nvidia`` table (what ``nvidia-ctk runtime configure
    --runtime=containerd`` writes) or ``enable_cdi = true``. Read line by line (no TOML
    library on Python 3.9); commented lines do not count.

    Raises:
        ParseError: a line that opens a table but never closes it.
    """
    nvidia = cdi = False
    for raw in _bounded(text, SMALL_FILE_BYTES, "config.toml").splitlines():
        line = raw.strip()
        if line.startswith("#"):
            continue
        if line.startswith("[") and not _TOML_TABLE.match(line):
            raise ParseError(f"config.toml: a table header that does not close: {line[:80]!r}")
        table = _TOML_TABLE.match(line)
        if table and _NVIDIA_RUNTIME.search(table.group(1).strip("[]")):
            nvidia = True
        if _ENABLE_CDI.match(line):
            cdi = True
    how = [name for name, seen in (("runtimes.nvidia", nvidia), ("enable_cdi", cdi)) if seen]
    return nvidia or cdi, ", ".join(how), cdi


def parse_smi_list(text: str) -> tuple[tuple[int, str], ...]:
    """The (index, UUID) of each GPU ``nvidia-smi -L`` lists; MIG lines are skipped.

    Raises:
        ParseError: no ``GPU N: ... (UUID: GPU-...)`` line at all.
    """
    gpus = []
    for line in _bounded(text, TOOL_OUTPUT_BYTES, "nvidia-smi -L").splitlines():
        match = _SMI_GPU.match(line.strip())
        if match:
            gpus.append((int(match.group(1)), match.group(2)))
    if not gpus:
        first = next((line.strip() for line in text.splitlines() if line.strip()), "")
        raise ParseError(f"nvidia-smi -L listed no GPU: {first[:120]!r}")
    return tuple(gpus)
