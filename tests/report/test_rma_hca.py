"""The RMA evidence of an HCA whose port flaps: the port, the count and the kernel's lines."""

from __future__ import annotations

import dataclasses

import pytest

from tests.collecting import collect_simulated
from validator.judge import Policy, judge_node
from validator.model import Hca, LinkFlap, NodeResult, Severity
from validator.report.rma_hca import file_name, hca_files

GENERATED = "generated 2026-12-07T00:00:00Z"
# mlx5e's lines as the kernel prints them, one carrying a terminal escape and a bidi mark.
LINES = (
    "[40211.113302] mlx5_core 0000:40:00.0 ibp64s0: Link down",
    "[40215.240011] mlx5_core 0000:40:00.0 ibp64s0: Link up",
    "[40301.000001] mlx5_core 0000:40:00.0 ibp64s0: Link down \x1b[2J\u202eevil",
    "[40302.000001] mlx5_core 0000:40:00.0 ibp64s0: Link up",
)


def _digest(facts: object) -> str:
    return "0" * 64


@pytest.fixture(scope="module")
def healthy() -> NodeResult:
    return judge_node(collect_simulated("healthy-8x-h100-sxm"), Policy(require_burn=False))


def _named(node: NodeResult, device: str) -> str:
    network = node.facts.network
    assert network is not None
    assert isinstance(network.hcas, tuple)
    hca: Hca = next(h for h in network.hcas if h.device == device)
    return file_name(node.hostname, hca)


def _flapping(node: NodeResult, *flaps: LinkFlap) -> NodeResult:
    network = node.facts.network
    assert network is not None
    facts = dataclasses.replace(node.facts, network=dataclasses.replace(network, flaps=flaps))
    return judge_node(facts, Policy(require_burn=False))


def test_a_flapping_port_gets_its_hca_an_evidence_file(healthy: NodeResult) -> None:
    node = _flapping(healthy, LinkFlap("ibp64s0", "0000:40:00.0", downs=2, ups=2, lines=LINES))
    (flap,) = [f for f in node.findings if f.check == "network.link_flaps"]
    assert flap.severity is Severity.FAIL
    ((name, text),) = hca_files(node, GENERATED, _digest)
    assert name == _named(node, "mlx5_1")
    assert "HCA mlx5_1 of " in text
    assert "FAIL network.link_flaps: ibp64s0 (0000:40:00.0) went down 2 time(s)" in text
    assert "ibp64s0 (0000:40:00.0), mlx5_1 port 1: 2 down, 2 up" in text
    assert "[40211.113302] mlx5_core 0000:40:00.0 ibp64s0: Link down" in text
    # Every line from the node is shown escaped: no terminal control reaches the file.
    assert "\x1b" not in text
    assert "\u202e" not in text
    assert "Link down \\x1b[2J\\u202eevil" in text


def test_only_the_flapping_hca_gets_one(healthy: NodeResult) -> None:
    assert hca_files(healthy, GENERATED, _digest) == []
    # A storage port of the same driver (no HCA's interface) is not judged: no file.
    storage = _flapping(healthy, LinkFlap("enp1s0f0", "0000:01:00.0", downs=3, ups=3))
    assert hca_files(storage, GENERATED, _digest) == []
    two = _flapping(
        healthy,
        LinkFlap("ibp64s0", "0000:40:00.0", downs=1, ups=2),
        LinkFlap("ibp79s0", "0000:4f:00.0", downs=1, ups=2),
    )
    names = [name for name, _ in hca_files(two, GENERATED, _digest)]
    assert names == [_named(two, "mlx5_1"), _named(two, "mlx5_2")]
