"""The check families. Each module has ``check(facts, policy, sku) -> list[Finding]``, no I/O."""

from __future__ import annotations

from validator.judge.checks import (
    burn,
    errors,
    inventory,
    memory,
    pcie,
    power,
    state,
    thermal,
    versions,
)
from validator.judge.checks.common import CheckFn

# In report order: what is there, then what it is running, then how healthy it is.
FAMILIES: tuple[tuple[str, CheckFn], ...] = (
    ("inventory", inventory.check),
    ("versions", versions.check),
    ("state", state.check),
    ("memory", memory.check),
    ("power", power.check),
    ("thermal", thermal.check),
    ("pcie", pcie.check),
    ("errors", errors.check),
    ("burn", burn.check),
)

__all__ = ["FAMILIES", "CheckFn"]
