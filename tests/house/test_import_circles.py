"""No import circle anywhere in ``validator/``: every import counts, wherever it stands.

The rooms test (tests/house/test_rooms.py) says which room may import which; it lets two
modules of one room import each other. This one reads the same imports (module level,
inside functions and under ``if TYPE_CHECKING:`` alike: a circle hidden in a function or
a type annotation is still two modules that cannot be understood one without the other)
and finds every set of modules that import one another round, which must be none.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from tests.house.test_rooms import MODULE_FILES, MODULES, ROOT, _named, imports_of


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (a package counts as its ``__init__``)."""
    graph: dict[str, set[str]] = {}
    for module, (path, package) in MODULE_FILES.items():
        source = path.read_text(encoding="utf-8")
        found = imports_of(module, source, MODULES, package=package)
        name = _named(module)
        graph[name] = {
            imported
            for imported in found
            if imported.split(".")[0] == "validator" and imported != name
        }
    return graph


def _reachable(graph: Mapping[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The sets of more than one module that each reach all the others, sorted."""
    reach = {module: _reachable(graph, module) for module in graph}
    found: set[tuple[str, ...]] = set()
    for module in graph:
        members = {other for other in reach[module] if module in reach.get(other, ())}
        if len(members | {module}) > 1:
            found.add(tuple(sorted(members | {module})))
    return sorted(list(members) for members in found)


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [["a", "b"], ["c", "d"]]),
    ],
)
def test_the_finder_finds_circles(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert sorted(circles(graph)) == expected


def test_the_graph_sees_function_level_and_type_checking_imports() -> None:
    graph = import_graph()
    # Inside a function (validator.service.collect_and_judge's Slurm planning) and under
    # TYPE_CHECKING.
    assert "validator.slurm.plan_and_reach" in graph["validator.service.collect_and_judge"]
    assert "validator.node.burnin.numpy_backend" in graph["validator.node.burnin.backend_choice"]
    assert ROOT not in graph or isinstance(graph[ROOT], set)


def test_no_module_of_validator_is_in_an_import_circle() -> None:
    found = circles(import_graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)
