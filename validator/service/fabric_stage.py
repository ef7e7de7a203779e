"""certify's stage across nodes (``--cross-node``): the runner for the reach, the fabric, the run.

:func:`check_reach` is asked before the per-node stage, so a fleet the stage cannot reach
is refused before anything is measured. :func:`run_fabric_stage` runs after the fleet is
judged, on the nodes it certified (validator.service.cross_node_service), with the runner
the reach gives:

- through Slurm: srun steps in one exclusive job per pair or group
  (validator.slurm.cross_node_srun), NCCL groups with ``--mpi=pmix``, or what Slurm's
  ``SLURM_MPI_TYPE`` names (``pmi2``);
- over SSH: each step over the host's SSH connection, NCCL groups through mpirun where
  ``GPUREADY_MPIRUN`` names one (validator.remote.cross_node_ssh);
- every host local (``gpuready_transport=local``, a simulated fleet): each step on this
  machine (validator.remote.cross_node_local), told in its environment which host it runs
  as, since every host is this machine: ``GPUREADY_STEP_HOST`` (a pair's step: its host's
  inventory name; a group's: its first host's) and ``GPUREADY_STEP_GROUP`` (the hosts of
  its pair or group, comma-separated, in the plan's order). A program run in a local fleet
  reads them to know its place; nothing else sets them.

The fabric's floors come from ``--fabric``, else from the certified nodes' SKU's network
expectation in the catalog (its link layer and rate); where neither decides, the stage is
not run and says why.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from validator.error_tree import BadInputError
from validator.model import (
    STAGE_KINDS,
    CrossNodeStage,
    FleetSummary,
    HostSpec,
    KindOutcome,
    Named,
    NodeResult,
    TransportName,
    Verdict,
)

if TYPE_CHECKING:
    from validator.judge.catalog import Catalog
    from validator.remote.cross_node_runner import CrossNodeRunner
    from validator.remote.transport import Transport
    from validator.slurm.job_fanout import SlurmOptions

DEFAULT_STAGE_S = 3600.0  # the stage's deadline when the run gives none
LINK_LAYERS = {"infiniband": "infiniband", "ethernet": "roce"}
_NOT_LOCAL = (
    "--cross-node reaches the hosts over SSH or through Slurm, or runs on this machine when "
    "every host is local: give --transport ssh or --slurm, or set gpuready_transport=local "
    "on every host"
)


def parse_kinds(text: str) -> tuple[str, ...]:
    """``--cross-node``'s value: ``rdma``, ``nccl`` or both, comma-separated, in that order.

    Raises:
        BadInputError: an empty list or an unknown kind.
    """
    asked = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [part for part in asked if part not in STAGE_KINDS]
    if not asked or unknown:
        raise BadInputError(
            f"--cross-node takes {' and/or '.join(STAGE_KINDS)}, comma-separated; got {text!r}"
        )
    return tuple(kind for kind in STAGE_KINDS if kind in asked)


def _all_local(transport: TransportName, hosts: Sequence[HostSpec]) -> bool:
    from validator.remote.per_host import named_transport

    return bool(hosts) and all(
        named_transport(host, transport) is TransportName.LOCAL for host in hosts
    )


def check_reach(
    slurm: SlurmOptions | None, transport: TransportName, hosts: Sequence[HostSpec]
) -> None:
    """Refuse, before anything is measured, a fleet the stage has no runner for.

    ``transport`` is the run's (``--transport``), for the hosts that name none.

    Raises:
        BadInputError: hosts through Ansible, or local and remote hosts mixed.
    """
    if slurm is not None or _all_local(transport, hosts):
        return
    from validator.remote.per_host import named_transport

    if any(named_transport(host, transport) is not TransportName.SSH for host in hosts):
        raise BadInputError(_NOT_LOCAL)


@contextlib.contextmanager
def stage_runner(
    slurm: SlurmOptions | None,
    transport: TransportName,
    hosts: Sequence[HostSpec],
    make_ssh: Callable[[], Transport],
) -> Iterator[CrossNodeRunner]:
    """The runner for the reach (see the module docstring), closed when the stage ends.

    ``make_ssh`` makes the SSH transport, configured as the run's.
    """
    if slurm is not None:
        from validator.slurm.cross_node_srun import SrunOptions, slurm_runner

        # Slurm's own SLURM_MPI_TYPE chooses the groups' --mpi (pmi2 where PMIx is not
        # built): the stage passes --mpi, which srun would prefer over the variable.
        options = SrunOptions(
            partition=slurm.partition,
            account=slurm.account,
            reservation=slurm.reservation,
            # "none" (some sites export it) would make every rank a world of one.
            mpi=_mpi_type(os.environ.get("SLURM_MPI_TYPE", ""), SrunOptions.mpi),
        )
        through_slurm = slurm_runner(options)
        try:
            yield through_slurm
        finally:
            through_slurm.close()
    elif _all_local(transport, hosts):
        from validator.remote.cross_node_local import local_runner

        yield local_runner(step_identity)
    else:
        from validator.remote.cross_node_ssh import ssh_runner
        from validator.remote.ssh import SshTransport

        ssh = make_ssh()
        assert isinstance(ssh, SshTransport)  # noqa: S101 - made by name
        runner, launcher = ssh_runner(
            ssh, {host.name: host for host in hosts}, os.environ.get("GPUREADY_MPIRUN")
        )
        try:
            yield runner
        finally:
            launcher.close()  # its SSH connections


STEP_HOST = "GPUREADY_STEP_HOST"
STEP_GROUP = "GPUREADY_STEP_GROUP"


def step_identity(hosts: Sequence[str]) -> dict[str, str]:
    """A local step's environment: the host it runs as and its group (module docstring)."""
    # Every "host" is this machine: no host name tells the step where it stands.
    return {STEP_HOST: hosts[0], STEP_GROUP: ",".join(hosts)}


def _mpi_type(slurm_mpi_type: str, default: str) -> str:
    """srun's ``--mpi`` for NCCL groups: Slurm's own setting, unless unset or ``none``."""
    chosen = slurm_mpi_type.strip()
    return chosen if chosen and chosen.lower() != "none" else default


def fabric_for(results: Sequence[NodeResult], catalog: Catalog) -> str | None:
    """The fabric the certified nodes' SKUs expect (one link layer and rate); None: not one."""
    from validator.judge.fabric_catalog import load_fabric_catalog

    wanted = set()
    for result in results:
        if result.verdict is not Verdict.CERTIFIED or result.sku is None:
            continue
        try:
            network = catalog.get(result.sku).network
        except KeyError:
            return None
        if network is None or network.none or not network.link_layer or not network.rate_gbps:
            return None
        wanted.add((LINK_LAYERS.get(network.link_layer.lower()), float(network.rate_gbps)))
    if len(wanted) != 1:
        return None
    link, rate = wanted.pop()
    rows = [
        row.id
        for row in load_fabric_catalog().fabrics
        if row.link == link and float(row.rate_gbit_s) == rate
    ]
    return rows[0] if len(rows) == 1 else None


def not_run(kinds: Sequence[str], results: Sequence[NodeResult], why: str) -> CrossNodeStage:
    """The stage as asked but not run: every certified node unresolved, with why."""
    nodes = tuple(r.hostname for r in results if r.verdict is Verdict.CERTIFIED)
    left = (Named(nodes, why),) if nodes else ()
    outcomes = tuple(KindOutcome(kind, 0.0, "", skipped=why, unresolved=left) for kind in kinds)
    return CrossNodeStage(kinds=tuple(kinds), fabric="", nodes=nodes, outcomes=outcomes)


def run_fabric_stage(
    results: Sequence[NodeResult],
    hosts: Sequence[HostSpec],
    runner: Callable[[], contextlib.AbstractContextManager[CrossNodeRunner]],
    kinds: Sequence[str],
    fabric: str | None,
    *,
    catalog: Catalog,
    deadline_s: float | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> tuple[tuple[NodeResult, ...], CrossNodeStage]:
    """The stage across nodes after the fleet's judgement: the results decided again, the stage.

    ``runner`` opens the runner (:func:`stage_runner`), only once the stage is to run.

    Raises:
        PolicyError: an unknown ``fabric`` id.
    """
    from validator.remote.cross_node_facts_plan import plan_from_facts
    from validator.service.cross_node_service import run_cross_node_stage

    row = fabric or fabric_for(results, catalog)
    if row is None:
        why = (
            "no fabric: the certified nodes' catalog rows do not name one network; "
            "give --fabric (ndr-400-ib, hdr-200-ib, roce-400)"
        )
        return tuple(results), not_run(kinds, results, why)
    deadline = time.monotonic() + (deadline_s or DEFAULT_STAGE_S)
    plan = plan_from_facts(results, hosts)
    with runner() as opened:
        return run_cross_node_stage(
            results, opened, kinds, row, plan, deadline=deadline, stop=stop, catalog=catalog
        )


def recounted(summary: FleetSummary | None, results: Sequence[NodeResult]) -> FleetSummary | None:
    """The fleet's counts by verdict again, after the stage decided some nodes anew."""
    if summary is None:
        return None
    verdicts = [result.verdict for result in results]
    return dataclasses.replace(
        summary,
        certified=verdicts.count(Verdict.CERTIFIED),
        not_certified=verdicts.count(Verdict.NOT_CERTIFIED),
        unknown=verdicts.count(Verdict.UNKNOWN),
    )


__all__ = [
    "DEFAULT_STAGE_S",
    "STEP_GROUP",
    "STEP_HOST",
    "check_reach",
    "fabric_for",
    "not_run",
    "parse_kinds",
    "recounted",
    "run_fabric_stage",
    "stage_runner",
    "step_identity",
]
