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
from typing import Optional, Tuple

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
    fabric = stage.fabric or None
    skipped = [o.skipped for o in stage.outcomes if o.skipped]
    if hostname not in stage.nodes or not stage.outcomes:
        return CertifiedFabric("not run", fabric, None, stage.kinds, _NOT_ENTERED)
    named = _named(stage, hostname)
    if named is not None:  # a kind that ran failed it: a kind left unrun never hides that
        return CertifiedFabric("failed", fabric, issued_at[:10], stage.kinds, named)
    if skipped:
        return CertifiedFabric("not run", fabric, None, stage.kinds, skipped[0])
    if hostname in stage.good:
        return CertifiedFabric("certified", fabric, issued_at[:10], stage.kinds)
    return CertifiedFabric("failed", fabric, issued_at[:10], stage.kinds, _NOT_GOOD)


_NOT_ENTERED = "the node did not enter the stage"
_NOT_GOOD = "not good in every kind the stage ran"


def _named(stage: CrossNodeStage, hostname: str) -> Optional[str]:
    """What the first kind that named ``hostname`` (slow, a link, unreachable, undecided) said."""
    for outcome in stage.outcomes:
        for named in (
            *outcome.slow_nodes,
            *outcome.slow_links,
            *outcome.unreachable,
            *outcome.unresolved,
        ):
            if hostname in named.hosts:
                return f"{outcome.kind}: {named.why}"
    return None


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

__all__ = ["FABRIC_FIELD", "STATUSES", "CertifiedFabric", "certified_fabric"]
