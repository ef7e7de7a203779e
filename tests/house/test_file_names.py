"""Each file name is used once under validator/: a name says which file it is, alone."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "validator"
# A package's own file has the package's name; the folder tells them apart.
SHARED_BY_DESIGN = frozenset({"__init__.py"})


def repeated_names(root: Path) -> dict[str, list[str]]:
    """File names under ``root`` that more than one Python file has, with their paths."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts or path.name in SHARED_BY_DESIGN:
            continue
        where[path.name].append(str(path.relative_to(root.parent)))
    return {name: paths for name, paths in where.items() if len(paths) > 1}


def test_every_file_name_under_validator_is_used_once() -> None:
    repeated = repeated_names(PACKAGE)
    listed = [f"{name}: {', '.join(paths)}" for name, paths in repeated.items()]
    assert not repeated, "\n".join(listed)


def test_a_repeated_name_is_found(tmp_path: Path) -> None:
    for folder in ("package/a", "package/b"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "errors.py").write_text("")
        (tmp_path / folder / "__init__.py").write_text("")
    assert repeated_names(tmp_path / "package") == {
        "errors.py": ["package/a/errors.py", "package/b/errors.py"]
    }
