"""What a node's HCAs should be: the catalog's per-system figures, and the policy's ``network:``.

The catalog (skus.yaml, each row's ``network:``) states what an NVIDIA reference system
of that GPU has: 8 compute ports at 400 Gb/s NDR InfiniBand on an HGX/DGX H100, H200 or
B200; 8 at 200 Gb/s HDR on an HGX/DGX A100. PCIe cards go into any server: no
expectation. A site states its own layout in the policy::

    network:                # what the compute fabric must be
      ports: 8              # at least this many ports Active at rate_gbps or faster
      rate_gbps: 400
      link_layer: InfiniBand    # or Ethernet (RoCE)
      pkey: "0xffff"        # every fabric port's PKey 0 (default: all the same)
      link_flaps_max: 0     # "Link down" lines an interface may show in the kernel log
      error_growth_max: 0   # how much each port error counter may grow during the burn

or ``network: none`` for a site without an RDMA fabric (no HCA expected, none judged).
Policy keys override the catalog's one by one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from validator.fields import Document, Field, FieldError, Invalid, Source

LINK_LAYERS = ("InfiniBand", "Ethernet")
NO_FABRIC = "none"
_RATE_MAX = 3200.0  # Gb/s: above any port (XDR is 800)


@dataclass(frozen=True)
class NetworkExpectation:
    """What the node's compute fabric ports must be; None: not judged from this."""

    ports: int | None = None
    rate_gbps: float | None = None
    link_layer: str | None = None
    pkey: str | None = None
    link_flaps_max: int | None = None
    error_growth_max: int | None = None
    source: str = ""  # where the figures come from (the catalog's public source)
    none: bool = False  # network: none: this site has no RDMA fabric


def _rate(name: str) -> Field:
    return Field(
        name, float, minimum=0.0, maximum=_RATE_MAX, above=True, convert=float, nullable=True
    )


NETWORK_FIELDS = Document(
    (
        Field("ports", int, minimum=0, maximum=64, nullable=True),
        _rate("rate_gbps"),
        Field("link_layer", str, choices=LINK_LAYERS, nullable=True),
        Field("pkey", str, pattern=r"0x[0-9a-fA-F]{1,4}", nullable=True),
        Field("link_flaps_max", int, minimum=0, maximum=999_999, nullable=True),
        Field("error_growth_max", int, minimum=0, maximum=999_999_999, nullable=True),
        Field("source", str, non_empty=True),
    ),
    wanted="a mapping of network keys (ports, rate_gbps, link_layer, pkey, ...) or 'none'",
)


def _expectation(value: object) -> NetworkExpectation:
    """``none``, or a mapping of :data:`NETWORK_FIELDS`, as the expectation it states."""
    if isinstance(value, str):
        if value.strip().lower() != NO_FABRIC:
            raise Invalid(value, wanted="'none' or a mapping of network keys")
        return NetworkExpectation(none=True)
    if not isinstance(value, dict):
        raise Invalid(value, wanted="'none' or a mapping of network keys")
    try:
        checked = NETWORK_FIELDS.check(value, Source("network"))
    except FieldError as exc:
        raise Invalid(problem=str(exc).partition(": ")[2] or str(exc)) from None
    return NetworkExpectation(**checked)


# The policy's key: "none" or a mapping; the catalog's: a mapping (or null).
POLICY_FIELD = Field("network", object, nullable=True, convert=_expectation)
CATALOG_FIELD = Field("network", dict, nullable=True, convert=_expectation)


def expected(
    catalog: NetworkExpectation | None, policy: NetworkExpectation | None
) -> NetworkExpectation | None:
    """The expectation judged: the policy's keys over the catalog's; None where neither says."""
    if policy is not None and policy.none:
        return policy
    if policy is None:
        return catalog
    if catalog is None:
        return policy
    merged = {
        field.name: getattr(policy, field.name)
        if getattr(policy, field.name) not in (None, "")
        else getattr(catalog, field.name)
        for field in dataclasses.fields(NetworkExpectation)
    }
    return NetworkExpectation(**merged)


__all__ = [
    "CATALOG_FIELD",
    "LINK_LAYERS",
    "NETWORK_FIELDS",
    "NO_FABRIC",
    "POLICY_FIELD",
    "NetworkExpectation",
    "expected",
]
