"""Each node's verdict in the fabric, for a whole fleet at once (JUnit, Prometheus).

The same verdict as the certificate's ``fabric`` field
(:func:`validator.model.fabric_certified.certified_fabric`): ``certified``, ``failed``
with why, or ``not run`` with why. That function answers one node and reads the stage's
good nodes anew each time, which for 1,000 nodes is a billion comparisons; here the
stage is read once.
"""

from __future__ import annotations

from collections.abc import Iterable

from validator.model import CrossNodeStage

NOT_ENTERED = "the node did not enter the stage"
NOT_GOOD = "not good in every kind the stage ran"


def fabric_verdicts(stage: CrossNodeStage, hostnames: Iterable[str]) -> dict[str, tuple[str, str]]:
    """Per host: its status in the fabric (certified, failed, not run) and why (or "")."""
    skipped = [outcome.skipped for outcome in stage.outcomes if outcome.skipped]
    entered = set(stage.nodes)
    good = set(stage.nodes)
    named: dict[str, str] = {}
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
    verdicts: dict[str, tuple[str, str]] = {}
    for host in hostnames:
        if host not in entered or not stage.outcomes:
            verdicts[host] = ("not run", NOT_ENTERED)
        elif host in named:  # a kind that ran failed it: a kind left unrun never hides that
            verdicts[host] = ("failed", named[host])
        elif skipped:
            verdicts[host] = ("not run", skipped[0])
        elif host in good:
            verdicts[host] = ("certified", "")
        else:
            verdicts[host] = ("failed", named.get(host, NOT_GOOD))
    return verdicts


__all__ = ["fabric_verdicts"]
