"""What Slurm says of its nodes: state, flags and reason, from ``sinfo``.

``sinfo --json`` where the installed Slurm has it, in each of its shapes:

* 22.05: ``{"nodes": [{"name", "state": "idle", "state_flags": ["DRAIN"], "reason": "",
  "partitions": [...]}]}``, every node once whatever ``-N`` or ``-n`` say;
* 23.02 and later: ``{"sinfo": [{"node": {"state": ["IDLE", "DRAIN"]}, "nodes": {"nodes":
  [...]}, "partition": {"name"}, "reason": {"description"}}]}``, one record per node
  (or group of alike nodes) and partition;
* ``scontrol show node --json`` (23.02 and later): ``{"nodes": [{"name", "state": [...],
  "reason": "...", "partitions": [...]}]}``.

Slurm without ``--json`` (before 21.08, or built without its JSON plugin) is read from
``sinfo -h -N -o '%N|%T|%E|%P'``: one row per node and partition, the state one
lower-case word with a suffix for a flag (``down*``: not responding; ``idle~``: powered
down; ``mixed-``: planned) and ``drained``/``draining`` for a drain without or with jobs.
22.05's text form can call a half-used node ``allocated`` rather than ``mixed`` (it
counts CPUs only when a CPU field is asked for); both are usable, so it does not matter.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from validator.safe_text import one_line
from validator.slurm.commands import Runner, SlurmError, checked, run_slurm, said

# Base node states (slurm.h's node_states); everything else Slurm prints is a flag.
_BASE_STATES = frozenset({"IDLE", "ALLOCATED", "MIXED", "DOWN", "ERROR", "FUTURE", "UNKNOWN"})
# A node in one of these states takes no job, now or later, until someone acts.
_DEAD_STATES = frozenset(
    {"DOWN", "ERROR", "FUTURE", "UNKNOWN", "FAIL", "FAILING", "INVAL", "INVALID"}
)
# Nor with one of these flags (a maintenance reservation is not one: gpuready's own
# quarantine is one, and a job in the reservation runs there).
_DEAD_FLAGS = frozenset(
    {
        "NOT_RESPONDING",
        "POWERED_DOWN",
        "POWERING_DOWN",
        "POWER_DOWN",
        "FAIL",
        "INVALID_REG",
        "REBOOT_ISSUED",
    }
)
# %T's suffixes (sinfo(1), NODE STATE CODES); "+" is ALLOCATED+, jobs completing.
_SUFFIXES = {
    "*": "NOT_RESPONDING",
    "~": "POWERED_DOWN",
    "#": "POWERING_UP",
    "%": "POWERING_DOWN",
    "!": "POWER_DOWN",
    "$": "MAINTENANCE",
    "@": "REBOOT_REQUESTED",
    "^": "REBOOT_ISSUED",
    "-": "PLANNED",
    "+": "COMPLETING",
}
# %T's words that are a flag on a base state, as scontrol and --json name them.
_COMPOUND: dict[str, tuple[str, tuple[str, ...]]] = {
    "DRAINED": ("IDLE", ("DRAIN",)),
    "DRAINING": ("ALLOCATED", ("DRAIN",)),
    "DRAIN": ("IDLE", ("DRAIN",)),
    "ALLOC": ("ALLOCATED", ()),
    "MIX": ("MIXED", ()),
    "RESERVED": ("IDLE", ("RESERVED",)),
    "MAINT": ("IDLE", ("MAINTENANCE",)),
    "MAINTENANCE": ("IDLE", ("MAINTENANCE",)),
    "FAIL": ("IDLE", ("FAIL",)),
    "FAILING": ("ALLOCATED", ("FAIL",)),
    "COMPLETING": ("IDLE", ("COMPLETING",)),
    "PLANNED": ("IDLE", ("PLANNED",)),
    "POWERED_DOWN": ("IDLE", ("POWERED_DOWN",)),
    "POWERING_DOWN": ("IDLE", ("POWERING_DOWN",)),
    "POWERING_UP": ("IDLE", ("POWERING_UP",)),
    "POWER_DOWN": ("IDLE", ("POWER_DOWN",)),
    "REBOOT_ISSUED": ("IDLE", ("REBOOT_ISSUED",)),
    "REBOOT_REQUESTED": ("IDLE", ("REBOOT_REQUESTED",)),
}
_NO_REASON = ("", "none", "(null)")
TEXT_FORMAT = "%N|%T|%E|%P"


@dataclass(frozen=True)
class SlurmNode:
    """One node as Slurm describes it."""

    name: str
    state: str  # the base state, upper case: IDLE, ALLOCATED, MIXED, DOWN, ...
    flags: tuple[str, ...] = ()  # DRAIN, NOT_RESPONDING, COMPLETING, MAINTENANCE, ...
    reason: str | None = None  # as set (without scontrol's "[user@time]"); None when none
    partitions: tuple[str, ...] = ()

    @property
    def drained(self) -> bool:
        """Whether the node is drained or draining."""
        return "DRAIN" in self.flags or self.state in ("DRAINED", "DRAINING")

    @property
    def usable(self) -> bool:
        """Whether a job can run there, now or once its jobs end."""
        return (
            self.state not in _DEAD_STATES
            and not _DEAD_FLAGS.intersection(self.flags)
            and not self.drained
        )

    @property
    def words(self) -> str:
        """Slurm's own words: ``DOWN+NOT_RESPONDING (reason: Not responding)``."""
        state = "+".join((self.state, *self.flags))
        return f"{state} (reason: {self.reason})" if self.reason else state


def _words(values: object) -> tuple[str, ...]:
    if not isinstance(values, list):
        return ()
    return tuple(dict.fromkeys(str(value).upper() for value in values if str(value)))


def _state(raw: object, extra_flags: object) -> tuple[str, tuple[str, ...]]:
    """(base, flags) from 22.05's word plus flag list, or 23.02's one list."""
    if isinstance(raw, list):
        words = _words(raw)
        base = next((word for word in words if word in _BASE_STATES), None)
        base = base or (words[0] if words else "UNKNOWN")
        flags = tuple(word for word in words if word != base)
    else:
        base, flags = str(raw or "unknown").upper(), ()
    return base, tuple(dict.fromkeys((*flags, *_words(extra_flags))))


def _reason(raw: object) -> str | None:
    if isinstance(raw, dict):  # 23.02's sinfo: {"description", "time", "user"}
        raw = raw.get("description")
    text = one_line(raw) if isinstance(raw, str) else ""
    return None if text.lower() in _NO_REASON else text


def _errors(data: dict[str, object], command: str) -> None:
    """Raise what Slurm put in the JSON's ``errors``: it answers 0 even without slurmctld."""
    errors = data.get("errors")
    if not isinstance(errors, list) or not errors:
        return
    words = []
    for error in errors:
        if isinstance(error, dict):
            parts = (error.get("description"), error.get("error"), error.get("source"))
            words.append(": ".join(str(part) for part in parts if part))
        else:
            words.append(str(error))
    said_text = one_line("; ".join(word for word in words if word)) or "an error"
    raise SlurmError(f"{command} failed: {said_text} (is slurmctld up and reachable?)")


def _merged(nodes: Iterable[SlurmNode]) -> list[SlurmNode]:
    """One node per name, in first-seen order, its partitions from every row."""
    by_name: dict[str, SlurmNode] = {}
    for node in nodes:
        known = by_name.get(node.name)
        if known is None:
            by_name[node.name] = node
        else:
            partitions = tuple(dict.fromkeys((*known.partitions, *node.partitions)))
            by_name[node.name] = replace(known, partitions=partitions)
    return list(by_name.values())


def _load(text: str, command: str) -> dict[str, object]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SlurmError(f"{command} gave no JSON: {one_line(exc)}") from None
    if not isinstance(data, dict):
        raise SlurmError(f"{command} gave JSON that is not an object")
    _errors(data, command)
    return data


def parse_sinfo_json(text: str) -> list[SlurmNode]:
    """Nodes from ``sinfo --json`` or ``scontrol show node --json``, each once.

    22.05's shape and 23.02's and later; a node in several partitions has them all.

    Raises:
        SlurmError: the text is not that JSON, or Slurm reported errors in it (22.05
            answers exit 0 with ``"errors": [{"error": "Unspecified error"}]`` and no
            nodes when slurmctld is down).
    """
    data = _load(text, "sinfo --json")
    found: list[SlurmNode] = []
    records, entries = data.get("sinfo"), data.get("nodes")
    if isinstance(records, list):
        for record in records:
            found.extend(_sinfo_record(record))
    elif isinstance(entries, list):
        for entry in entries:
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                continue
            base, flags = _state(entry.get("state"), entry.get("state_flags"))
            partitions = entry.get("partitions")
            found.append(
                SlurmNode(
                    name=entry["name"],
                    state=base,
                    flags=flags,
                    reason=_reason(entry.get("reason")),
                    partitions=tuple(str(p) for p in partitions)
                    if isinstance(partitions, list)
                    else (),
                )
            )
    else:
        raise SlurmError("sinfo --json gave neither a node list nor sinfo records")
    return _merged(found)


def _sinfo_record(record: object) -> list[SlurmNode]:
    """The nodes of one 23.02+ ``sinfo`` record (one partition, one state)."""
    if not isinstance(record, dict):
        return []
    node, nodes, partition = record.get("node"), record.get("nodes"), record.get("partition")
    names = nodes.get("nodes") if isinstance(nodes, dict) else None
    if not isinstance(names, list):
        return []
    base, flags = _state(node.get("state") if isinstance(node, dict) else None, None)
    name = partition.get("name") if isinstance(partition, dict) else None
    return [
        SlurmNode(
            name=str(each),
            state=base,
            flags=flags,
            reason=_reason(record.get("reason")),
            partitions=(str(name),) if name else (),
        )
        for each in names
        if str(each)
    ]


def parse_sinfo_text(text: str) -> list[SlurmNode]:
    """Nodes from ``sinfo -h -N -o '%N|%T|%E|%P'`` (one row per node and partition).

    Rows of ``'%N|%T|%E'`` (no partition) are read too.

    The state word maps to scontrol's names: ``drained`` is IDLE with DRAIN, ``draining``
    ALLOCATED with DRAIN, ``down*`` DOWN with NOT_RESPONDING. The reason may hold ``|``:
    the partition is the last field, the reason all between.
    """
    rows: list[SlurmNode] = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 3 or not parts[0]:
            continue
        if len(parts) == 3:  # '%N|%T|%E', without the partition
            parts.append("")
        name, word = parts[0].strip(), parts[1].strip()
        reason, partition = "|".join(parts[2:-1]).strip(), parts[-1].strip().rstrip("*")
        flags: list[str] = []
        while word and word[-1] in _SUFFIXES:
            flags.insert(0, _SUFFIXES[word[-1]])
            word = word[:-1]
        upper = word.upper()
        base, more = _COMPOUND.get(upper, (upper or "UNKNOWN", ()))
        rows.append(
            SlurmNode(
                name=name,
                state=base,
                flags=tuple(dict.fromkeys((*more, *flags))),
                reason=None if reason.lower() in _NO_REASON else reason,
                partitions=(partition,) if partition else (),
            )
        )
    return _merged(rows)


def json_unsupported(result_said: str) -> bool:
    """Whether a failed ``--json`` call means this Slurm has no JSON output (fall back).

    getopt's ``unrecognized option '--json'`` (Slurm before 21.08), or a missing
    serializer / data_parser plugin (Slurm built without JSON support). Anything else,
    e.g. slurmctld unreachable, is a real failure.
    """
    lowered = result_said.lower()
    option = ("unrecognized option" in lowered or "invalid option" in lowered) and (
        "json" in lowered
    )
    return option or "serializer" in lowered or "data_parser" in lowered


def list_nodes(
    runner: Runner = run_slurm,
    *,
    partition: str | None = None,
    names: Sequence[str] | None = None,
) -> list[SlurmNode]:
    """The cluster's nodes (of ``partition``, or only ``names``), as Slurm sees them now.

    ``sinfo --json`` lists every node whatever filter it is given, so the filters are
    applied here, the same way for the text form. Names Slurm does not know are simply
    absent from the answer.

    Raises:
        SlurmError: sinfo is missing, failed, or gave nothing readable.
    """
    result = runner(["sinfo", "--json"])
    if result.returncode == 0:
        nodes = parse_sinfo_json(result.stdout)
    elif json_unsupported(said(result)):
        argv = ["sinfo", "-h", "-N", "-o", TEXT_FORMAT]
        nodes = parse_sinfo_text(checked(argv, runner).stdout)
    else:
        raise SlurmError(f"sinfo --json failed: {said(result)}")
    if partition is not None:
        nodes = [node for node in nodes if partition in node.partitions]
    if names is not None:
        wanted = set(names)
        nodes = [node for node in nodes if node.name in wanted]
    return nodes


__all__ = [
    "TEXT_FORMAT",
    "SlurmNode",
    "json_unsupported",
    "list_nodes",
    "parse_sinfo_json",
    "parse_sinfo_text",
]
