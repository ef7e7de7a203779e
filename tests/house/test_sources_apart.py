"""Simulation and capture bundles stay in their folders: only the modules named here import them.

validator/node/sim holds the scenarios, the simulated burn and interconnect, and NVML's
double; validator/node/capture writes, replays and checks capture bundles. The agent's
entry point chooses where facts come from; the few others that reach a source's folder
today are listed with why, so the lists can only shrink.
"""

from __future__ import annotations

from collections.abc import Mapping

from tests.house.test_import_circles import import_graph

SIMULATION = "validator.node.sim"
CAPTURE = "validator.node.capture"
LIVE = "validator.node.live"
# importer -> why it may, for now
MAY_IMPORT_THE_SIMULATION: dict[str, str] = {
    "validator.node.agent": "the agent's entry point chooses the source of facts",
    "validator.cli.scenarios": "`gpuready scenarios` lists and describes the built-in scenarios",
    "validator.cli.capture": "`gpuready capture --simulate` writes a bundle from a scenario",
}
MAY_IMPORT_CAPTURE: dict[str, str] = {
    "validator.node.agent": "the agent's entry point chooses the source of facts",
    "validator.cli.capture": "`gpuready capture` writes a bundle",
}


MAY_IMPORT_LIVE: dict[str, str] = {
    "validator.node.agent": "the agent's entry point chooses the source of facts",
}


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def importers_of(graph: Mapping[str, set[str]], package: str) -> set[str]:
    """The modules outside ``package`` that import anything inside it."""
    return {
        module
        for module, imported in graph.items()
        if not _under(module, package) and any(_under(target, package) for target in imported)
    }


def test_only_the_named_modules_import_the_simulation() -> None:
    assert importers_of(import_graph(), SIMULATION) == set(MAY_IMPORT_THE_SIMULATION)


def test_only_the_named_modules_import_capture_bundles() -> None:
    assert importers_of(import_graph(), CAPTURE) == set(MAY_IMPORT_CAPTURE)


def test_only_the_agents_entry_point_imports_the_live_source() -> None:
    assert importers_of(import_graph(), LIVE) == set(MAY_IMPORT_LIVE)


def test_an_importer_outside_the_folder_is_found_and_one_inside_is_not() -> None:
    graph = {
        "validator.node.sim.scenario": {"validator.node.sim.fake_nvml"},
        "validator.judge.verdict": {"validator.node.sim.scenario"},
        "validator.node.collect": {"validator.node.host"},
    }
    assert importers_of(graph, SIMULATION) == {"validator.judge.verdict"}
