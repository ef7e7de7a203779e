"""What a certificate says of the stage across nodes: certified in the fabric, or not.

An optional certificate field (``fabric``) beside the node certified alone: written only
when the run asked for the stage (``certify --cross-node``), so a certificate issued
without it keeps the bytes its seal covers.

- ``certified``: the node was good in every kind the stage ran, on ``fabric`` (the fabric
  catalog's id), on ``date`` (the run's, UTC);
- ``not run``: the stage was asked but did not measure the node (no fabric, a kind not
  run), ``why`` says what;
- ``failed``: the stage named the node (slow, unreachable, a slow link) or left it
  undecided. Such a node is not certified, so its certificate is rarely issued; the
  value is kept for a node certified by a later rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, Optional, Tuple

from validator.fields import Document, Field
from validator.model.cross_node_stage import CrossNodeStage

STATUSES = ("certified", "not run", "failed")


@dataclass(frozen=True)
class CertifiedFabric:
    """The node in the fabric: the status, the fabric and the date, the kinds run, why not."""

    status: str  # one of STATUSES
    fabric: Optional[str]  # the fabric catalog's id; None when none was decided
    date: Optional[str]  # YYYY-MM-DD (UTC) of the run; None when not run
    kinds: Tuple[str, ...] = ()  # rdma, nccl: the kinds asked
    why: str = ""  # for "not run" and "failed": what the stage said


def certified_fabric(
    stage: Optional[CrossNodeStage], hostname: str, issued_at: str
) -> Optional[CertifiedFabric]:
    """The certificate's ``fabric`` of ``hostname``; None when the stage was not asked.

    ``issued_at`` is the certificate's ISO 8601 time: the stage ran in the same run.
    """
    if stage is None:
        return None
    status, why = fabric_verdicts(stage, (hostname,))[hostname]
    date = None if status == "not run" else issued_at[:10]
    return CertifiedFabric(status, stage.fabric or None, date, stage.kinds, why)


NOT_ENTERED = "the node did not enter the stage"
NOT_GOOD = "not good in every kind the stage ran"


def fabric_verdicts(stage: CrossNodeStage, hostnames: Iterable[str]) -> Dict[str, Tuple[str, str]]:
    """Per host: its status in the fabric (one of STATUSES) and why ("" when certified).

    The stage is read once for all of ``hostnames`` (a fleet's JUnit and Prometheus ask
    for every node at once). A kind that ran and named the node (slow, a link,
    unreachable, undecided) fails it even where another kind was left unrun.
    """
    skipped = [outcome.skipped for outcome in stage.outcomes if outcome.skipped]
    entered = set(stage.nodes)
    good = set(stage.nodes)
    named: Dict[str, str] = {}
    for outcome in stage.outcomes:
        good &= set(outcome.good)
        for entry in (
            *outcome.slow_nodes,
            *outcome.slow_links,
            *outcome.unreachable,
            *outcome.unresolved,
        ):
            for host in entry.hosts:
                named.setdefault(host, f"{outcome.kind}: {entry.why}")
    verdicts: Dict[str, Tuple[str, str]] = {}
    for host in hostnames:
        if host not in entered or not stage.outcomes:
            verdicts[host] = ("not run", NOT_ENTERED)
        elif host in named:
            verdicts[host] = ("failed", named[host])
        elif skipped:
            verdicts[host] = ("not run", skipped[0])
        elif host in good:
            verdicts[host] = ("certified", "")
        else:
            verdicts[host] = ("failed", NOT_GOOD)
    return verdicts


_FABRIC_KEYS = Document(
    (
        Field("status", str, choices=STATUSES, required=True),
        Field("fabric", str, nullable=True, required=True),
        Field("date", str, nullable=True, required=True),
        Field("kinds", list, item=Field("kind", str), convert=tuple),
        Field("why", str),
    ),
    noun="field",
    wanted="a JSON object",
)
# The certificate's ``fabric`` field, as validator.certificate reads it back.
FABRIC_FIELD = Field(
    "fabric", dict, document=_FABRIC_KEYS, convert=lambda data: CertifiedFabric(**data)
)

__all__ = ["FABRIC_FIELD", "STATUSES", "CertifiedFabric", "certified_fabric", "fabric_verdicts"]
