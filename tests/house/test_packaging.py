"""The wheel holds every package of validator/: `pip install .` is how the README installs it.

pyproject.toml names its packages one by one (templates/, playbooks/ and inventory/ are
mapped in); a subpackage left off that list is missing from an installed gpuready, though
every test passes on the editable install CI uses. validator.node.bandwidth was.
"""

from __future__ import annotations

from pathlib import Path

import pytest

# The standard library's from 3.11 (this suite's Python); older ones skip these tests.
tomllib = pytest.importorskip("tomllib")

REPO = Path(__file__).resolve().parent.parent.parent


def _listed() -> set[str]:
    with (REPO / "pyproject.toml").open("rb") as handle:
        config = tomllib.load(handle)
    return set(config["tool"]["setuptools"]["packages"])


def test_every_package_of_the_validator_tree_is_listed_for_the_wheel() -> None:
    on_disk = {
        ".".join(init.parent.relative_to(REPO).parts)
        for init in (REPO / "validator").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert "validator.node.bandwidth" in on_disk  # the walk finds subpackages
    assert on_disk - _listed() == set()


def test_every_listed_package_exists() -> None:
    with (REPO / "pyproject.toml").open("rb") as handle:
        package_dir = tomllib.load(handle)["tool"]["setuptools"]["package-dir"]
    # templates/, playbooks/ and inventory/ are mapped in from the top of the repository.
    mapped = {name: REPO / folder for name, folder in package_dir.items()}
    assert {"validator.templates", "validator.playbooks", "validator.inventory"} <= set(mapped)
    for name in _listed():
        folder = mapped.get(name, REPO.joinpath(*name.split(".")))
        assert folder.is_dir(), name
