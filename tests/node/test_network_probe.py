"""The network probe through the collector: this machine's real tools, counters around the burn."""

from __future__ import annotations

import datetime
import os
import shutil
from collections.abc import Sequence

import pytest

from tests.collecting import collect_simulated
from validator.judge.policy import Policy
from validator.judge.verdict import judge_node
from validator.model import NodeFacts, Severity, Unavailable
from validator.node.burnin.burn_config import BurnConfig
from validator.node.collect import CollectRequest, collect
from validator.node.network_probe import counters_after, network_facts
from validator.node.parsers.ibstat import parse_ibstat
from validator.node.sim.simulated_source import SimulatedSource
from validator.node.system import CommandResult, LiveSystem, System

ROOT = "/sys/class/infiniband"


class _LiveHost:
    """A scenario's GPUs on this machine's own host: its /sys, ibstat, ibv_devinfo and dmesg."""

    def __init__(self) -> None:
        self._scenario = SimulatedSource("healthy-8x-h100-sxm")

    @property
    def simulated(self) -> bool:
        return False

    @property
    def measures(self) -> bool:
        return False  # no burn: the facts and the network only

    def system(self) -> System:
        return LiveSystem()

    def first_facts(self, request: CollectRequest) -> NodeFacts:
        return self._scenario.first_facts(request)

    def burn(self, *args: object) -> object:
        raise AssertionError("not asked")

    def measure_interconnect(self, *args: object) -> object:
        raise AssertionError("not asked")


@pytest.mark.skipif(os.path.exists(ROOT), reason="this host has RDMA devices")
def test_this_machine_has_no_infiniband_device_and_an_h100_node_fails_for_it() -> None:
    facts = collect(_LiveHost(), CollectRequest())  # type: ignore[arg-type]
    assert facts.network is not None
    assert facts.network.hcas == ()  # read, and none there: not "not measured"
    result = judge_node(facts, Policy(require_burn=False))
    (ports,) = [f for f in result.findings if f.check == "network.ports"]
    assert (ports.severity, ports.observed, ports.required) == (
        Severity.FAIL,
        "no InfiniBand device",
        True,
    )
    assert "8 ports at 400 Gb/s InfiniBand" in ports.message


@pytest.mark.skipif(shutil.which("ibstat") is None, reason="infiniband-diags is not installed")
def test_the_real_ibstat_and_ibv_devinfo_run_here_and_parse() -> None:
    live = LiveSystem()
    ibstat = live.run(("ibstat",))
    assert ibstat.rc == 0, ibstat.stderr
    cas = parse_ibstat(ibstat.stdout)
    assert len(cas) == len(os.listdir(ROOT)) if os.path.exists(ROOT) else cas == []
    if shutil.which("ibv_devinfo") is not None:
        devinfo = live.run(("ibv_devinfo", "-v"))
        # No device (or no ib_uverbs): it says so and fails; the probe then cross-checks nothing.
        assert devinfo.ok or devinfo.stderr.strip() or devinfo.stdout.strip()
    # What the probe makes of them: sysfs read, the tools agreeing with it.
    network = network_facts(live)
    assert not isinstance(network.hcas, Unavailable)
    assert network.disagreements == ()


class _Counting:
    """A host whose one HCA's symbol_error counter reads 3, then 903 (during a burn)."""

    def __init__(self) -> None:
        self.reads = 0
        port = f"{ROOT}/mlx5_0/ports/1"
        self.files = {
            f"{ROOT}/mlx5_0/fw_ver": "28.39.2048\n",
            f"{port}/state": "4: ACTIVE\n",
            f"{port}/phys_state": "5: LinkUp\n",
            f"{port}/rate": "400 Gb/sec (4X NDR)\n",
            f"{port}/link_layer": "InfiniBand\n",
            f"{port}/counters/symbol_error": "3\n",
        }

    def hostname(self) -> str:
        return "counting"

    def read_text(self, path: str) -> str | None:
        if path.endswith("symbol_error"):
            self.reads += 1
            return "3\n" if self.reads == 1 else "903\n"
        return self.files.get(path)

    def glob(self, pattern: str) -> list[str]:
        if pattern == f"{ROOT}/*":
            return [f"{ROOT}/mlx5_0"]
        return [f"{ROOT}/mlx5_0/ports/1"] if pattern.endswith("/ports/*") else []

    def which(self, name: str) -> str | None:
        return None

    def run(self, argv: Sequence[str], timeout_s: float = 30.0) -> CommandResult:
        return CommandResult(127, "", f"{argv[0]}: command not found")

    def now(self) -> datetime.datetime:
        return datetime.datetime.now(datetime.timezone.utc)


def test_counters_are_read_again_after_the_burn_and_their_growth_judged() -> None:
    host = _Counting()
    before = network_facts(host)
    after = counters_after(host, before)
    assert not isinstance(after.hcas, Unavailable)
    (port,) = after.hcas[0].ports
    assert not isinstance(port.counters, Unavailable)
    assert not isinstance(port.counters_after, Unavailable)
    values = {c.name: c.value for c in port.counters_after}
    assert values["symbol_error"] == 903
    assert {c.name: c.value for c in port.counters}["symbol_error"] == 3


def test_the_collector_reads_the_counters_around_a_simulated_burn() -> None:
    facts = collect_simulated("healthy-8x-h100-sxm", burn=BurnConfig(duration_s=1.0))
    assert facts.network is not None
    assert not isinstance(facts.network.hcas, Unavailable)
    for hca in facts.network.hcas:
        (port,) = hca.ports
        assert not isinstance(port.counters_after, Unavailable), hca.device
    quick = collect_simulated("healthy-8x-h100-sxm", interconnect="off")
    assert quick.network is not None
    assert not isinstance(quick.network.hcas, Unavailable)
    assert all(
        isinstance(p.counters_after, Unavailable) for h in quick.network.hcas for p in h.ports
    )
