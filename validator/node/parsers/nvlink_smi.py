r"""Parse ``nvidia-smi nvlink -s`` (link state and speed) and ``nvidia-smi nvlink -e`` (errors).

Both print one block per GPU, headed ``GPU N: <name> (UUID: GPU-...)``, its lines
indented by spaces or by a tab and a space::

    GPU 0: NVIDIA GB200 (UUID: GPU-d1b93026-6d5b-03bd-3a71-f85b47a61bde)
             Link 0: 53.125 GB/s
             Link 1: <inactive>

    GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-fde0a018-ad1a-bbec-ccf6-50a9f64bd178)
         Link 0: Replay Errors: 0
         Link 0: Recovery Errors: 0
         Link 0: CRC Errors: 0

The speed is per direction, as nvidia-smi prints it. Older drivers print the CRC
errors as two counters (``CRC FLIT Errors`` and ``CRC Data Errors``); R450 and newer
print one ``CRC Errors`` count, read here as the flit count (NVML's
``NVML_NVLINK_ERROR_DL_CRC_FLIT``) with the data count not offered: judged against the
per-counter limit, a sum can only fail sooner, never pass a link that should fail.

Where the output is not whole, the GPU says so rather than showing fewer links: a
``...`` (or ``[...]``) line a user left where they cut the paste, a header cut in the
middle (``GPU 2: NVIDIA GB200 (UUID:``), a link line that does not read. Such a GPU's
links are "not measured", so a judge cannot take a cut paste for a GPU with links
missing. ``NVML: Unable to retrieve NVLink information as all links are inactive`` is
a measurement: no link up. Lines that are neither a header nor a link line (the
command echoed, a shell prompt, a ``=== GPU 1 ===`` banner of a loop) are not nvidia-smi's
and are skipped.

Pure functions over text, standard library only (Python 3.9): shipped to hosts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from validator.model import (
    Measured,
    NvLinkErrorCounts,
    NvLinkState,
    Reason,
    Unavailable,
)
from validator.node.parsers.base import ParseError
from validator.node.parsers.smi_errors import classify_smi_error

_HEADER = re.compile(r"^GPU\s+([0-9]+):\s*(.*)$")
_NAME_UUID = re.compile(r"^(.*?)\s*\(UUID:\s*([^)]*)\)\s*$")
_UUID = re.compile(r"^GPU-[0-9A-Fa-f]{8}(?:-[0-9A-Fa-f]{4}){3}-[0-9A-Fa-f]{12}$")
_LINK = re.compile(r"^Link\s+([0-9]+)\s*:\s*(.*)$")
_SPEED = re.compile(r"^([0-9]{1,20}(?:\.[0-9]{1,20})?)\s*GB/s$")
_COUNTER = re.compile(r"^([A-Za-z][A-Za-z ]*?)\s+Errors?\s*:\s*(\S.*)$")
_ELISION = re.compile(r"^(?:\.{3,}|\[\s*\.{3}\s*\]|…)$")
_ALL_INACTIVE = re.compile(r"unable to retrieve nvlink information as all links are inactive", re.I)

# nvidia-smi's counter names (lower case) and the NvLinkErrorCounts field each fills;
# None: printed by newer drivers, not one of the four judged.
_COUNTERS: dict[str, str | None] = {
    "replay": "replay",
    "recovery": "recovery",
    "crc": "crc_flit",  # the one CRC count of R450+ (see the module doc)
    "crc flit": "crc_flit",
    "crc data": "crc_data",
    "ecc": None,
    "data tx": None,
    "data rx": None,
}
_UNSUPPORTED = ("n/a", "[not supported]", "not supported", "[n/a]")
# A count as nvidia-smi prints it: ASCII digits only (str.isdigit and \d also take "²" or
# Arabic-Indic digits, which int() refuses or reads), and at most 20 of them (a 64-bit
# counter has 20), so a pasted run of digits is a bad reading, not a huge number.
_DIGITS = re.compile(r"^[0-9]{1,20}$")


@dataclass(frozen=True)
class NvLinkGpu:
    """One GPU's block of ``nvidia-smi nvlink -s``."""

    index: int
    name: str
    uuid: Measured[str]
    links: Measured[tuple[NvLinkState, ...]]


@dataclass(frozen=True)
class NvLinkErrorGpu:
    """One GPU's block of ``nvidia-smi nvlink -e``."""

    index: int
    name: str
    uuid: Measured[str]
    errors: Measured[tuple[NvLinkErrorCounts, ...]]


@dataclass(frozen=True)
class NvLinkStatusReport:
    """What ``nvidia-smi nvlink -s`` printed: a block per GPU, or the error it gave instead."""

    gpus: tuple[NvLinkGpu, ...]
    error: str | None = None  # nvidia-smi's error line (no driver, no device), if any


@dataclass(frozen=True)
class NvLinkErrorReport:
    """What ``nvidia-smi nvlink -e`` printed: a block per GPU, or the error it gave instead."""

    gpus: tuple[NvLinkErrorGpu, ...]
    error: str | None = None


# ---------------------------------------------------------------- blocks


@dataclass
class _Block:
    """One GPU's lines as read, before they are turned into facts."""

    index: int
    name: str
    uuid: Measured[str]
    lines: list[tuple[int, str]]  # (link, what follows "Link N:")
    cut: str = ""  # why the block is not whole; "" when it is
    all_inactive: bool = False


def _header(index: int, rest: str) -> _Block:
    match = _NAME_UUID.match(rest)
    if match is None:
        if "(UUID:" in rest or rest.endswith("(") or not rest:
            # "GPU 2: NVIDIA GB200 (UUID:" - the output ends inside the header.
            name = rest.split("(UUID:", maxsplit=1)[0].strip()
            cut = Unavailable(Reason.NOT_MEASURED, "the output ends inside this GPU's header")
            return _Block(index, name, cut, [], cut="the output ends inside this GPU's header")
        missing = Unavailable(Reason.NOT_MEASURED, "the output does not show the UUID")
        return _Block(index, rest.strip(), missing, [])  # "GPU 0: NVIDIA GB300", no UUID
    name, uuid = match.group(1).strip(), match.group(2).strip()
    if _UUID.match(uuid):
        return _Block(index, name, uuid, [])
    shown = Unavailable(Reason.NOT_MEASURED, f"the output shows the UUID as {_excerpt(uuid)}")
    return _Block(index, name, shown, [])


def _blocks(text: str) -> list[_Block]:
    """The GPU blocks of an ``nvidia-smi nvlink`` output, in order.

    Raises:
        ParseError: a GPU is listed twice (two outputs run together).
    """
    blocks: list[_Block] = []
    seen: dict[int, _Block] = {}
    for raw in text.splitlines():
        line = raw.strip()
        header = _HEADER.match(line)
        if header is not None:
            index = _number(header.group(1))
            if index is None:
                raise ParseError(
                    f"the nvidia-smi nvlink output names a GPU {_excerpt(header.group(1))}, "
                    "not a GPU number; capture it again with `nvidia-smi nvlink`"
                )
            if index in seen:
                raise ParseError(
                    f"GPU {index} is listed twice in the nvidia-smi nvlink output; "
                    "keep one run's output in the file"
                )
            block = _header(index, header.group(2).strip())
            seen[index] = block
            blocks.append(block)
            continue
        if not blocks:
            continue  # the command echoed, a prompt: before any GPU
        block = blocks[-1]
        if _ELISION.match(line):
            block.cut = block.cut or _after(block, "a '...' line stands for lines left out")
        elif _ALL_INACTIVE.search(line):
            block.all_inactive = True
        else:
            link = _LINK.match(line)
            if link is not None:
                number = _number(link.group(1))
                if number is None:
                    why = f"a link is numbered {_excerpt(link.group(1))}"
                    block.cut = block.cut or _after(block, why)
                else:
                    block.lines.append((number, link.group(2).strip()))
    return blocks


def _number(digits: str) -> int | None:
    """The number ASCII ``digits`` spell; None past 20 digits (no GPU, link or counter has more)."""
    return int(digits) if _DIGITS.match(digits) else None


def _excerpt(text: str) -> str:
    """``text`` as a message shows it: quoted, cut to a line's worth."""
    return repr(text) if len(text) <= 24 else f"{text[:20]!r}... ({len(text)} characters)"


def _after(block: _Block, why: str) -> str:
    where = f" after link {block.lines[-1][0]}" if block.lines else ""
    return f"the output is cut short{where}: {why}"


def _smi_error(text: str) -> str | None:
    found = classify_smi_error(text)
    return found[1] if found is not None else None


def _no_blocks(text: str, command: str) -> str | None:
    """nvidia-smi's error line for an output with no GPU block; None when it is blank.

    Raises:
        ParseError: text that is neither a GPU block nor an nvidia-smi error.
    """
    error = _smi_error(text)
    if error is not None or not text.strip():
        return error
    raise ParseError(
        f"not `nvidia-smi nvlink {command}` output: no 'GPU N: <name> (UUID: ...)' line; "
        f"capture it again with `nvidia-smi nvlink {command}`"
    )


# ---------------------------------------------------------------- nvlink -s


def parse_nvlink_status(text: str) -> NvLinkStatusReport:
    """Read ``nvidia-smi nvlink -s`` (``--status``): each GPU's links, up with a speed or not.

    Raises:
        ParseError: the text is not such an output (and no nvidia-smi error either),
            or it lists a GPU twice.
    """
    blocks = _blocks(text)
    if not blocks:
        return NvLinkStatusReport(gpus=(), error=_no_blocks(text, "-s"))
    return NvLinkStatusReport(
        gpus=tuple(
            NvLinkGpu(block.index, block.name, block.uuid, _states(block)) for block in blocks
        )
    )


def _states(block: _Block) -> Measured[tuple[NvLinkState, ...]]:
    if block.cut:
        return Unavailable(Reason.NOT_MEASURED, block.cut)
    if block.all_inactive and not block.lines:
        return ()  # nvidia-smi: "all links are inactive"
    if not block.lines:
        return Unavailable(Reason.NOT_SUPPORTED, "nvidia-smi lists no NVLink for this GPU")
    states: dict[int, NvLinkState] = {}
    for link, value in block.lines:
        if link in states:
            return Unavailable(Reason.ERROR, f"link {link} is listed twice")
        state = _state(link, value)
        if state is None:
            return Unavailable(
                Reason.ERROR, f"link {link} reads {_excerpt(value)}, neither a speed nor <inactive>"
            )
        states[link] = state
    return tuple(states[link] for link in sorted(states))


def _state(link: int, value: str) -> NvLinkState | None:
    if value.lower() == "<inactive>":
        return NvLinkState(link=link, active=False)
    speed = _SPEED.match(value)
    if speed is None:
        return None  # a link without a figure is no evidence of a working link
    return NvLinkState(link=link, active=True, speed_gb_s=float(speed.group(1)))


# ---------------------------------------------------------------- nvlink -e


def parse_nvlink_errors(text: str) -> NvLinkErrorReport:
    """Read ``nvidia-smi nvlink -e`` (``--errorcounters``): each GPU's error counts per link.

    Raises:
        ParseError: the text is not such an output (and no nvidia-smi error either),
            or it lists a GPU twice.
    """
    blocks = _blocks(text)
    if not blocks:
        return NvLinkErrorReport(gpus=(), error=_no_blocks(text, "-e"))
    return NvLinkErrorReport(
        gpus=tuple(
            NvLinkErrorGpu(block.index, block.name, block.uuid, _counts(block)) for block in blocks
        )
    )


def _counts(block: _Block) -> Measured[tuple[NvLinkErrorCounts, ...]]:
    if block.cut:
        return Unavailable(Reason.NOT_MEASURED, block.cut)
    if not block.lines:
        why = (
            "nvidia-smi: all links are inactive, no counter was read"
            if block.all_inactive
            else "nvidia-smi lists no NVLink for this GPU"
        )
        return Unavailable(Reason.NOT_MEASURED if block.all_inactive else Reason.NOT_SUPPORTED, why)
    counts: dict[int, dict[str, Measured[int]]] = {}
    for link, value in block.lines:
        counter = _COUNTER.match(value)
        if counter is None:
            why = f"link {link} reads {_excerpt(value)}, not an error counter"
            return Unavailable(Reason.ERROR, why)
        name = counter.group(1).strip().lower()
        if name not in _COUNTERS:
            return Unavailable(
                Reason.ERROR, f"link {link} has a counter nvidia-smi calls {_excerpt(name)}"
            )
        field = _COUNTERS[name]
        if field is None:
            continue
        fields = counts.setdefault(link, {})
        if field in fields:
            return Unavailable(Reason.ERROR, f"link {link} lists its {name} errors twice")
        fields[field] = _count(counter.group(2).strip())
    return tuple(_link_counts(link, counts[link]) for link in sorted(counts))


def _count(raw: str) -> Measured[int]:
    number = _number(raw)
    if number is not None:
        return number
    if raw.lower() in _UNSUPPORTED:
        return Unavailable(Reason.NOT_SUPPORTED, f"nvidia-smi prints {raw}")
    return Unavailable(Reason.ERROR, f"nvidia-smi prints {_excerpt(raw)}")


def _link_counts(link: int, fields: dict[str, Measured[int]]) -> NvLinkErrorCounts:
    one_crc = "crc_flit" in fields and "crc_data" not in fields
    if one_crc:
        fields = dict(fields)
        fields["crc_data"] = Unavailable(
            Reason.NOT_SUPPORTED, "nvidia-smi prints one CRC count (read as the flit count)"
        )
    missing = Unavailable(Reason.NOT_MEASURED, "nvidia-smi printed no such count")
    return NvLinkErrorCounts(
        link=link,
        crc_flit=fields.get("crc_flit", missing),
        crc_data=fields.get("crc_data", missing),
        replay=fields.get("replay", missing),
        recovery=fields.get("recovery", missing),
    )


__all__ = [
    "NvLinkErrorGpu",
    "NvLinkErrorReport",
    "NvLinkGpu",
    "NvLinkStatusReport",
    "parse_nvlink_errors",
    "parse_nvlink_status",
]
