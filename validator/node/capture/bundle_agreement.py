"""Do a bundle's measurement files describe the node its nvidia-smi files list? No I/O.

:mod:`validator.node.capture.bundle_consistency` compares the views of the GPUs (the nvidia-smi
files and the PCI listing) with each other. This module holds every other file of a
bundle to the GPUs those views list, so that a file recorded on another machine is a
:class:`~validator.model.SourceConflict` (a required UNKNOWN), never a PASS for a GPU
the node does not have:

* ``dcgmi diag``: every GPU id it reports must be one of the node's indices, and no
  test may report one GPU twice with different outcomes;
* ``nvbandwidth``: no more CUDA devices than the node has GPUs, each device's bus id
  (v0.6 to v0.8 print them) one of the node's;
* ``all_reduce_perf`` (one host's run): no more ranks than the node has GPUs, each
  rank's bus id one of the node's, run on the host the bundle names;
* ``nvidia-smi nvlink -s`` / ``-e``: no more GPU blocks than the node has GPUs, each
  block's UUID one of the node's, at the index the query gives it;
* the kernel log: journal and syslog lines name the host they were written on.

Only what a file states is compared, and a node listing cut short is not blamed for the
GPUs it lacks: counts and identities are held to it only when it is whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from validator.model import DcgmTestResult, GpuFacts, SourceConflict
from validator.node.parsers.kernel_log_shape import log_hosts
from validator.node.parsers.nccl_tests import NcclParsed
from validator.node.parsers.nvbandwidth import NvbParsed
from validator.node.parsers.smi_common import normalize_bus_id
from validator.safe_text import bus_key

_SHOWN = 3  # ids named in one sentence before "and N more"


@dataclass(frozen=True)
class NodeGpus:
    """The node's GPUs as its chosen nvidia-smi view lists them.

    Attributes:
        file: the view's file name.
        gpus: its GPUs.
        whole: whether it lists every GPU it had to (not cut short): only then do
            GPUs another file names beyond it, or missing from it, disagree with it.
    """

    file: str
    gpus: tuple[GpuFacts, ...]
    whole: bool

    def indices(self) -> set[int]:
        """The GPUs' NVML indices."""
        return {gpu.index for gpu in self.gpus}

    def bus_keys(self) -> set[tuple[int | None, int, int | None]]:
        """The (domain, bus, device) of each GPU whose bus id was read."""
        keys = (bus_key(gpu.pci_bus_id) for gpu in self.gpus if isinstance(gpu.pci_bus_id, str))
        return {key for key in keys if key is not None}

    def uuid_at(self) -> dict[str, int]:
        """Each read UUID -> its GPU's index."""
        return {gpu.uuid: gpu.index for gpu in self.gpus if isinstance(gpu.uuid, str)}


def _listed(items: Iterable[object]) -> str:
    ordered = sorted({str(item) for item in items})
    shown = ", ".join(ordered[:_SHOWN])
    rest = len(ordered) - _SHOWN
    return f"{shown} and {rest} more" if rest > 0 else shown


def _gpus(count: int) -> str:
    return f"{count} GPU" + ("" if count == 1 else "s")


def _too_many(file: str, what: str, count: int, node: NodeGpus) -> SourceConflict | None:
    if not node.whole or not node.gpus or count <= len(node.gpus):
        return None
    return SourceConflict(
        "gpu_count",
        f"{file} {what} {count}, but {node.file} lists {_gpus(len(node.gpus))}",
        (file, node.file),
    )


def _unknown_buses(buses: Iterable[str], node: NodeGpus) -> list[str]:
    """The bus ids ``file`` gives that none of the node's GPUs has (compared in NVML form)."""
    known = node.bus_keys()
    if not node.whole or not known:
        return []
    strange = []
    for bus in buses:
        key = bus_key(bus)
        # nccl-tests' old "0x18" names the bus alone: compared on the bus number.
        if key is None:
            number = _bus_number(bus)
            if number is not None and all(have[1] != number for have in known):
                strange.append(bus)
        elif key is not None and key not in known:
            strange.append(normalize_bus_id(bus) or bus)
    return strange


def _bus_number(bus: str) -> int | None:
    try:
        return int(bus.strip(), 16) if bus.strip().lower().startswith("0x") else None
    except ValueError:
        return None


def dcgm_conflicts(
    file: str, results: Sequence[DcgmTestResult], node: NodeGpus
) -> list[SourceConflict]:
    """A DCGM diagnostic reporting GPUs the node lacks, or one GPU twice in one test.

    Args:
        file: the DCGM file's name.
        results: its results, as parsed.
        node: the node's GPUs.
    """
    found = []
    ids = {result.gpu_index for result in results if result.gpu_index is not None}
    absent = ids - node.indices()
    if absent and node.whole:
        found.append(
            SourceConflict(
                "gpu_count",
                f"{file} reports GPU {_listed(absent)}, which {node.file} does not list "
                f"(it lists {_gpus(len(node.gpus))}): another host's diagnostic?",
                (file, node.file),
            )
        )
    # A run reports each GPU once per test; no real output repeats one (a pasted file does).
    outcomes: dict[tuple[str, int], list[str]] = {}
    for result in results:
        if result.gpu_index is not None:
            outcomes.setdefault((result.test, result.gpu_index), []).append(result.outcome.value)
    twice = sorted(key for key, seen in outcomes.items() if len(seen) > 1)
    if twice:
        test, gpu = twice[0]
        more = f" (and {len(twice) - 1} more)" if len(twice) > 1 else ""
        found.append(
            SourceConflict(
                "duplicate_gpu",
                f"{file} reports GPU {gpu} {len(outcomes[(test, gpu)])} times in {test} "
                f"({', '.join(sorted(set(outcomes[(test, gpu)])))}){more}: the file is not "
                "one run",
                (file,),
            )
        )
    return found


def nvbandwidth_conflicts(
    file: str, parsed: NvbParsed, node: NodeGpus, host: str | None = None
) -> list[SourceConflict]:
    """An nvbandwidth output for more GPUs than the node has, at other bus ids, or of another host.

    ``host``: the bundle's host name, where it states one; ``-j`` output names the host
    of each device it lists.

    A multi-node run is no figure of one node and is reported as such elsewhere
    (validator.node.capture.recorded_bandwidth): its GPUs are not held to this node's.
    """
    if parsed.multi_node:
        return []
    if parsed.devices:
        count = len(parsed.devices)
    else:
        widths = [
            len(row) for case in parsed.testcases for matrix in case.matrices for row in matrix.rows
        ]
        count = max(widths, default=0)
    found = []
    too_many = _too_many(file, "measured CUDA devices: its matrices cover", count, node)
    if too_many is not None:
        found.append(too_many)
    strange = _unknown_buses((d.pci_bus_id for d in parsed.devices if d.pci_bus_id), node)
    if strange:
        found.append(
            SourceConflict(
                "pci_bus_id",
                f"{file} measured GPUs at {_listed(strange)}, which {node.file} does not list",
                (file, node.file),
            )
        )
    ran_on = parsed.hosts[0] if parsed.hosts else None
    if host and ran_on and not same_host(ran_on, host):
        found.append(
            SourceConflict(
                "hostname",
                f"{file} measured the GPUs of {ran_on}, but the bundle is of {host}",
                (file,),
            )
        )
    return found


def nccl_conflicts(
    file: str, parsed: NcclParsed, node: NodeGpus, host: str | None
) -> list[SourceConflict]:
    """A one-host nccl-tests run on more GPUs than the node has, other boards or another host.

    A run over several hosts is no figure of one node and is reported as such elsewhere
    (validator.node.capture.recorded_bandwidth); its ranks are not held to this node's GPUs.
    """
    if parsed.multi_node or not parsed.ranks:
        return []
    found = []
    too_many = _too_many(file, "ran ranks on GPUs of one host:", len(parsed.ranks), node)
    if too_many is not None:
        found.append(too_many)
    strange = _unknown_buses((rank.bus for rank in parsed.ranks), node)
    if strange:
        found.append(
            SourceConflict(
                "pci_bus_id",
                f"{file} ran ranks on GPUs at {_listed(strange)}, which {node.file} does not list",
                (file, node.file),
            )
        )
    ran_on = parsed.hosts[0]
    if host and not same_host(ran_on, host):
        found.append(
            SourceConflict(
                "hostname",
                f"{file} ran on {ran_on}, but the bundle is of {host}",
                (file,),
            )
        )
    return found


@dataclass(frozen=True)
class NvLinkBlock:
    """One GPU block of an ``nvidia-smi nvlink`` file: its index and UUID where shown."""

    index: int
    uuid: str | None


def nvlink_conflicts(
    file: str, blocks: Sequence[NvLinkBlock], node: NodeGpus
) -> list[SourceConflict]:
    """An ``nvlink`` file with more GPU blocks than the node has, or other GPUs' UUIDs.

    A UUID at another index than the query gives it means the two files number the GPUs
    differently (UUIDs swapped between files): which GPU's links are which is unknown.
    """
    found = []
    too_many = _too_many(file, "holds GPU blocks:", len(blocks), node)
    if too_many is not None:
        found.append(too_many)
    at = node.uuid_at()
    if not at:
        return found
    foreign = [block.uuid for block in blocks if block.uuid and block.uuid not in at]
    if foreign and node.whole:
        found.append(
            SourceConflict(
                "gpu_uuid",
                f"{file} names GPUs {_listed(foreign)}, which {node.file} does not list",
                (file, node.file),
            )
        )
    moved = [
        (block.index, block.uuid, at[block.uuid])
        for block in blocks
        if block.uuid in at and at[block.uuid] != block.index
    ]
    if moved:
        index, uuid, theirs = moved[0]
        more = f" (and {len(moved) - 1} more)" if len(moved) > 1 else ""
        found.append(
            SourceConflict(
                "gpu_uuid",
                f"{file} calls {uuid} GPU {index}, but {node.file} calls it GPU {theirs}{more}",
                (file, node.file),
            )
        )
    return found


def same_host(one: str, other: str) -> bool:
    """Whether two printed host names can name one host (short name against FQDN, any case)."""
    first, second = one.strip().casefold(), other.strip().casefold()
    return first == second or first.split(".")[0] == second.split(".")[0]


def kernel_log_conflicts(
    file: str, text: str, host: str | None, named_in: str
) -> list[SourceConflict]:
    """A kernel log whose lines were written on another host than the bundle names.

    Args:
        file: the log's file name.
        text: the log.
        host: the bundle's host name (meta.json or hostname.txt); None where it gives none.
        named_in: the file that names the host.
    """
    if not host:
        return []
    others = sorted(name for name in log_hosts(text) if not same_host(name, host))
    if not others:
        return []
    return [
        SourceConflict(
            "hostname",
            f"{file} holds kernel log lines of {_listed(others)}, but {named_in} names the "
            f"host {host}",
            (file, named_in),
        )
    ]


__all__ = [
    "NodeGpus",
    "NvLinkBlock",
    "dcgm_conflicts",
    "kernel_log_conflicts",
    "nccl_conflicts",
    "nvbandwidth_conflicts",
    "nvlink_conflicts",
    "same_host",
]
