"""The check families. Each module has ``check(facts, policy, sku) -> list[Finding]``, no I/O."""

from __future__ import annotations

from validator.judge.checks import (
    burn,
    busy,
    consistency,
    container,
    dcgm,
    errors,
    gpudirect,
    host_health,
    interconnect,
    inventory,
    memory,
    network,
    nvlink,
    pcie,
    plausibility,
    power,
    state,
    thermal,
    versions,
)
from validator.judge.checks.finding_helpers import CheckFn
from validator.model import CheckFamily

# In report order: what is there, then what it is running, then how healthy it is.
# The interconnect comes last, after DCGM: CheckFamily lists it there, it is an active
# measurement judged like the burn-in and DCGM (after the passive NVLink state and
# counters it builds on), and appending it leaves every other family's order as it was.
FAMILIES: tuple[tuple[CheckFamily, CheckFn], ...] = (
    (CheckFamily.INVENTORY, inventory.check),
    (CheckFamily.INVENTORY, consistency.check),
    (CheckFamily.INVENTORY, plausibility.check),
    (CheckFamily.VERSIONS, versions.check),
    (CheckFamily.STATE, state.check),
    (CheckFamily.STATE, busy.check),
    (CheckFamily.MEMORY, memory.check),
    (CheckFamily.POWER, power.check),
    (CheckFamily.THERMAL, thermal.check),
    (CheckFamily.PCIE, pcie.check),
    (CheckFamily.NVLINK, nvlink.check),
    (CheckFamily.ERRORS, errors.check),
    (CheckFamily.BURN, burn.check),
    (CheckFamily.DCGM, dcgm.check),
    (CheckFamily.INTERCONNECT, interconnect.check),
    (CheckFamily.NETWORK, network.check),
    (CheckFamily.GPUDIRECT, gpudirect.check),
    (CheckFamily.HOST, host_health.check),
    (CheckFamily.CONTAINER, container.check),
)

__all__ = ["FAMILIES", "CheckFn"]
