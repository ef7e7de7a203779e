"""Each check family reads as one place: its check and its drift comparison, paired by name.

A family certify judges (``validator/judge/checks`` :data:`FAMILIES`) has its drift
comparison in ``validator/drift/<family>_drift.py``, or is listed in :data:`NO_DRIFT` with
why it has none. Every ``*_drift.py`` names a family certify judges, declares it as its
``FAMILY``, and is run by :func:`validator.drift.compare.compare` through
:data:`~validator.drift.compare.FAMILY_COMPARISONS`, whose entries pair each family with
a comparison of that family's module.
"""

from __future__ import annotations

import importlib
from collections.abc import Collection, Mapping
from pathlib import Path

from validator.drift.compare import FAMILY_COMPARISONS
from validator.judge.checks import FAMILIES
from validator.model import CheckFamily

REPO = Path(__file__).resolve().parent.parent.parent
DRIFT = REPO / "validator" / "drift"
SUFFIX = "_drift.py"

# Families certify judges that drift does not compare, and why.
NO_DRIFT: dict[CheckFamily, str] = {
    CheckFamily.MEMORY: (
        "memory.capacity and memory.ecc_mode: the capacity is the board's (a swap is "
        "inventory's), and the memory's error counters are errors.* checks, compared in "
        "errors_drift.py"
    ),
    CheckFamily.THERMAL: (
        "idle headroom and throttling are read afresh by each certify; the certificate "
        "holds no thermal figure to compare with"
    ),
}


def judged_families() -> set[CheckFamily]:
    """The families certify judges, from the judge's own table."""
    return {family for family, _ in FAMILIES}


def drift_modules(folder: Path) -> set[str]:
    """The family names of the ``*_drift.py`` files in ``folder``."""
    return {path.name[: -len(SUFFIX)] for path in folder.glob(f"*{SUFFIX}")}


def unpaired(
    families: Collection[CheckFamily], modules: Collection[str], exempt: Mapping[CheckFamily, str]
) -> list[str]:
    """What breaks the pairing: a family without a drift module, a module without a family."""
    problems = [
        f"{family.value}: no validator/drift/{family.value}{SUFFIX} and not in NO_DRIFT"
        for family in sorted(families, key=lambda f: f.value)
        if family.value not in modules and family not in exempt
    ]
    problems += [
        f"{family.value}: in NO_DRIFT but has {family.value}{SUFFIX}"
        for family in sorted(exempt, key=lambda f: f.value)
        if family.value in modules
    ]
    names = {family.value for family in families}
    problems += [
        f"{name}{SUFFIX} names no check family certify judges"
        for name in sorted(modules)
        if name not in names
    ]
    return problems


def test_every_family_has_a_drift_module_or_says_why_not() -> None:
    assert unpaired(judged_families(), drift_modules(DRIFT), NO_DRIFT) == []


def test_a_missing_or_stray_pairing_is_found(tmp_path: Path) -> None:
    for name in ("inventory_drift.py", "bogus_drift.py", "drift_helpers.py"):
        (tmp_path / name).write_text("")
    modules = drift_modules(tmp_path)
    assert modules == {"inventory", "bogus"}
    families = {CheckFamily.INVENTORY, CheckFamily.POWER, CheckFamily.THERMAL}
    assert unpaired(families, modules, {CheckFamily.THERMAL: "why"}) == [
        "power: no validator/drift/power_drift.py and not in NO_DRIFT",
        "bogus_drift.py names no check family certify judges",
    ]
    assert unpaired(families, modules | {"power"}, {CheckFamily.POWER: "why"}) == [
        "thermal: no validator/drift/thermal_drift.py and not in NO_DRIFT",
        "power: in NO_DRIFT but has power_drift.py",
        "bogus_drift.py names no check family certify judges",
    ]


def test_each_drift_module_declares_its_family() -> None:
    for name in sorted(drift_modules(DRIFT)):
        module = importlib.import_module(f"validator.drift.{name}_drift")
        assert module.FAMILY is CheckFamily(name), name


def test_compare_runs_every_drift_module_under_its_family() -> None:
    run = set()
    for family, comparison in FAMILY_COMPARISONS:
        module = importlib.import_module(comparison.__module__)
        assert module.__name__ == f"validator.drift.{family.value}_drift", comparison
        assert module.FAMILY is family, comparison
        run.add(family.value)
    assert run == drift_modules(DRIFT)
