"""The network family on the real shapes: each check healthy and faulty, and its action."""

from __future__ import annotations

import dataclasses

import pytest

from tests.collecting import collect_simulated
from validator.judge.catalog import load_catalog
from validator.judge.checks import network
from validator.judge.network_policy import NetworkExpectation
from validator.judge.policy import Policy, policy_from_mapping
from validator.judge.verdict import judge_node
from validator.model import (
    Action,
    Finding,
    Hca,
    HcaPort,
    LinkFlap,
    NetworkFacts,
    NodeFacts,
    PortCounter,
    Reason,
    Severity,
    Unavailable,
    Verdict,
)

H100 = load_catalog().get("h100-sxm")
PCIE = load_catalog().get("h100-pcie")
COUNTERS = ("symbol_error", "link_downed", "port_rcv_errors", "excessive_buffer_overrun_errors",
            "link_error_recovery")  # fmt: skip


def _port(device: str, **changes: object) -> HcaPort:
    port = HcaPort(
        device=device,
        port=1,
        state="ACTIVE",
        phys_state="LinkUp",
        rate_gbps=400.0,
        rate_text="400 Gb/sec (4X NDR)",
        link_layer="InfiniBand",
        pkey="0xffff",
        counters=tuple(PortCounter(name, 0) for name in COUNTERS),
    )
    return dataclasses.replace(port, **changes)  # type: ignore[arg-type]


def _hca(index: int, port: HcaPort | None = None, **changes: object) -> Hca:
    device = f"mlx5_{index}"
    hca = Hca(
        device=device,
        hca_type="MT4129",
        fw_ver="28.39.2048",
        board_id="MT_0000000838",
        node_guid=f"58a2:e103:002a:a0{index:02x}",
        ports=(port or _port(device),),
    )
    return dataclasses.replace(hca, **changes)  # type: ignore[arg-type]


def _facts(hcas: object, flaps: object = (), said: tuple[str, ...] = ()) -> NodeFacts:
    net = NetworkFacts(source="sysfs", hcas=hcas, flaps=flaps, disagreements=said)  # type: ignore[arg-type]
    return NodeFacts(hostname="n", source="simulate", network=net)


def _healthy(**one: object) -> list[Hca]:
    return [_hca(i) for i in range(8)]


def _by(findings: list[Finding], check: str) -> list[Finding]:
    return [f for f in findings if f.check == check]


def test_eight_ndr_ports_pass_every_check() -> None:
    findings = network.check(_facts(tuple(_healthy())), Policy(), H100)
    assert findings
    assert all(f.severity is Severity.PASS for f in findings), findings
    assert {f.check for f in findings} == {
        "network.ports", "network.port_state", "network.rate", "network.firmware",
    }  # fmt: skip
    # The checks that pass quietly say so in network.ports' message.
    (ports,) = _by(findings, "network.ports")
    assert ports.message.endswith(
        "; link layer as expected, one PKey, no port error counted, no link flap"
    )


def test_no_infiniband_device_where_ports_are_expected_fails() -> None:
    (finding,) = network.check(_facts(()), Policy(), H100)
    assert (finding.check, finding.severity, finding.observed) == (
        "network.ports", Severity.FAIL, "no InfiniBand device",
    )  # fmt: skip
    assert finding.required
    assert finding.action is Action.FIX_SOFTWARE


def test_no_hca_and_no_expectation_is_not_a_required_pass() -> None:
    (finding,) = network.check(_facts(()), Policy(), PCIE)
    assert finding.severity is Severity.PASS
    assert not finding.required
    (finding,) = network.check(_facts(()), Policy(), None)
    assert finding.severity is Severity.PASS
    assert not finding.required


def test_a_site_without_a_fabric_states_none() -> None:
    policy = policy_from_mapping({"network": "none"}, "policy")
    (finding,) = network.check(_facts(()), policy, H100)
    assert finding.severity is Severity.PASS
    assert "network: none" in finding.message


def test_the_policy_states_its_own_layout() -> None:
    policy = policy_from_mapping({"network": {"ports": 4, "rate_gbps": 200}}, "policy")
    hcas = tuple(_hca(i, _port(f"mlx5_{i}", rate_gbps=200.0)) for i in range(4))
    findings = network.check(_facts(hcas), policy, H100)
    assert all(f.severity is Severity.PASS for f in findings), findings


def test_unread_hcas_are_unknown_never_pass() -> None:
    unread = Unavailable(Reason.NOT_MEASURED, "infiniband-sysfs.txt not in the capture")
    (finding,) = network.check(_facts(unread), Policy(), H100)
    assert finding.severity is Severity.UNKNOWN
    assert finding.required


def test_facts_without_the_network_give_no_finding() -> None:
    assert network.check(NodeFacts(hostname="n", source="live"), Policy(), H100) == []


def test_polling_is_a_cable_or_transceiver() -> None:
    hcas = _healthy()
    hcas[6] = _hca(6, _port("mlx5_6", state="DOWN", phys_state="Polling", rate_gbps=10.0))
    findings = network.check(_facts(tuple(hcas)), Policy(), H100)
    (state,) = _by(findings, "network.port_state")
    assert state.severity is Severity.FAIL
    assert "mlx5_6 port 1" in state.message
    assert state.action is Action.RESEAT_CABLE_RISER
    assert _by(findings, "network.ports")[0].severity is Severity.FAIL


def test_a_disabled_port_fails_only_where_the_node_is_short() -> None:
    hcas = [*_healthy(), _hca(8, _port("mlx5_8", state="DOWN", phys_state="Disabled"))]
    (spare,) = _by(network.check(_facts(tuple(hcas)), Policy(), H100), "network.port_state")
    assert spare.severity is Severity.WARN
    assert not spare.required
    hcas[3] = _hca(3, _port("mlx5_3", state="DOWN", phys_state="Disabled"))
    hcas.pop()
    (short,) = _by(network.check(_facts(tuple(hcas)), Policy(), H100), "network.port_state")
    assert short.severity is Severity.FAIL
    assert short.required


def test_a_port_up_but_not_activated_is_the_subnet_manager() -> None:
    hcas = _healthy()
    hcas[1] = _hca(1, _port("mlx5_1", state="INIT"))
    (state,) = _by(network.check(_facts(tuple(hcas)), Policy(), H100), "network.port_state")
    assert state.severity is Severity.FAIL
    assert "subnet manager" in state.action_source


def test_a_port_at_200_of_400_fails_the_rate() -> None:
    hcas = _healthy()
    hcas[5] = _hca(5, _port("mlx5_5", rate_gbps=200.0, rate_text="200 Gb/sec (4X HDR)"))
    (rate,) = _by(network.check(_facts(tuple(hcas)), Policy(), H100), "network.rate")
    assert (rate.severity, rate.observed, rate.expected) == (
        Severity.FAIL,
        "200 Gb/s",
        ">= 400 Gb/s",
    )


def test_ports_on_the_wrong_link_layer() -> None:
    hcas = tuple(_hca(i, _port(f"mlx5_{i}", link_layer="Ethernet")) for i in range(8))
    findings = network.check(_facts(hcas), Policy(), H100)
    (layer,) = _by(findings, "network.link_layer")
    assert layer.severity is Severity.FAIL
    assert layer.action is Action.FIX_SOFTWARE
    assert "Ethernet" in layer.message


@pytest.mark.parametrize(
    ("field", "value"), [("fw_ver", "28.41.1000"), ("board_id", "DEL0000000034")]
)
def test_one_firmware_and_psid_per_model(field: str, value: str) -> None:
    hcas = _healthy()
    hcas[2] = _hca(2, **{field: value})
    (fw,) = _by(network.check(_facts(tuple(hcas)), Policy(), H100), "network.firmware")
    assert fw.severity is Severity.FAIL
    assert fw.action is Action.FIX_SOFTWARE
    assert value in fw.message
    assert "mlx5_2" in fw.message


def test_other_models_may_run_other_firmware() -> None:
    hcas = [*_healthy(), _hca(8, hca_type="MT4125", fw_ver="22.31.1014", board_id="MT_0000000359")]
    (fw,) = _by(network.check(_facts(tuple(hcas)), Policy(), H100), "network.firmware")
    assert fw.severity is Severity.PASS


def test_pkey_the_same_everywhere_and_the_policys() -> None:
    hcas = _healthy()
    hcas[4] = _hca(4, _port("mlx5_4", pkey="0x8001"))
    (pkey,) = _by(network.check(_facts(tuple(hcas)), Policy(), H100), "network.pkey")
    assert pkey.severity is Severity.FAIL
    policy = policy_from_mapping({"network": {"pkey": "0x8001"}}, "policy")
    (pkey,) = _by(network.check(_facts(tuple(_healthy())), policy, H100), "network.pkey")
    assert pkey.severity is Severity.FAIL
    assert "0x8001" in pkey.message


def test_counters_since_boot_warn_and_their_growth_fails() -> None:
    before = tuple(PortCounter(n, 5 if n == "symbol_error" else 0) for n in COUNTERS)
    after = tuple(PortCounter(n, 905 if n == "symbol_error" else 0) for n in COUNTERS)
    hcas = _healthy()
    hcas[0] = _hca(0, _port("mlx5_0", counters=before, counters_after=after))
    findings = network.check(_facts(tuple(hcas)), Policy(), H100)
    (errors,) = _by(findings, "network.errors")
    assert errors.severity is Severity.WARN
    assert not errors.required
    (growth,) = _by(findings, "network.error_growth")
    assert (growth.severity, growth.observed) == (Severity.FAIL, "+900")
    assert growth.action is Action.REPLACE_TRANSCEIVER
    allowed = policy_from_mapping({"network": {"error_growth_max": 1000}}, "policy")
    passed = network.check(_facts(tuple(hcas)), allowed, H100)
    assert _by(passed, "network.error_growth") == []
    assert "no counter grew during the burn-in" in _by(passed, "network.ports")[0].message


def test_no_growth_is_judged_without_a_burn() -> None:
    assert (
        _by(network.check(_facts(tuple(_healthy())), Policy(), H100), "network.error_growth") == []
    )


def test_link_flaps_fail_and_an_unread_log_is_unknown() -> None:
    flaps = (LinkFlap("ibp24s0", "0000:18:00.0", downs=3, ups=3),)
    (flap,) = _by(
        network.check(_facts(tuple(_healthy()), flaps), Policy(), H100), "network.link_flaps"
    )
    assert flap.severity is Severity.FAIL
    assert flap.action is Action.RESEAT_CABLE_RISER
    unread = Unavailable(Reason.NOT_MEASURED, "dmesg.txt not in the capture")
    (flap,) = _by(
        network.check(_facts(tuple(_healthy()), unread), Policy(), H100), "network.link_flaps"
    )
    assert flap.severity is Severity.UNKNOWN


def test_tools_that_disagree_with_sysfs_warn() -> None:
    said = ("mlx5_0 port 1 state: sysfs says ACTIVE, ibstat says DOWN",)
    (src,) = _by(
        network.check(_facts(tuple(_healthy()), said=said), Policy(), H100), "network.sources"
    )
    assert src.severity is Severity.WARN
    assert "ibstat says DOWN" in src.message


def test_expectation_merges_policy_over_catalog() -> None:
    from validator.judge.network_policy import expected

    catalog = NetworkExpectation(ports=8, rate_gbps=400.0, link_layer="InfiniBand")
    merged = expected(catalog, NetworkExpectation(rate_gbps=200.0))
    assert (merged.ports, merged.rate_gbps, merged.link_layer) == (8, 200.0, "InfiniBand")


@pytest.mark.parametrize(
    ("scenario", "failed"),
    [
        ("healthy-8x-h100-sxm", set()),
        ("healthy-8x-a100-80gb", set()),
        ("ib-port-down", {"network.ports", "network.port_state"}),
        ("ib-port-200g", {"network.ports", "network.rate"}),
        ("ib-cable-polling", {"network.ports", "network.port_state"}),
    ],
)
def test_scenarios(scenario: str, failed: set[str]) -> None:
    result = judge_node(collect_simulated(scenario), Policy(require_burn=False))
    got = {
        f.check
        for f in result.findings
        if f.check.startswith("network.") and f.severity is Severity.FAIL
    }
    assert got == failed
    assert any(
        f.check == "network.ports" and f.severity is Severity.PASS for f in result.findings
    ) == (not failed)
    if failed:
        assert result.verdict is Verdict.NOT_CERTIFIED


# ---- review fixes: what could not be read is never a pass (issue 34 review)

UNREAD = Unavailable(Reason.NO_PERMISSION, "counters/symbol_error: permission denied")


def test_counters_that_could_not_be_read_are_unknown_not_passed() -> None:
    unread = tuple(PortCounter(name, UNREAD) for name in COUNTERS)
    hcas = [_hca(i, _port(f"mlx5_{i}", counters=unread)) for i in range(8)]
    (errors,) = _by(network.check(_facts(tuple(hcas)), Policy(), H100), "network.errors")
    assert errors.severity is Severity.UNKNOWN


def test_growth_without_a_reading_before_the_burn_is_unknown_not_zero() -> None:
    before = tuple(PortCounter(n, UNREAD if n == "symbol_error" else 0) for n in COUNTERS)
    after = tuple(PortCounter(n, 5 if n == "symbol_error" else 0) for n in COUNTERS)
    hcas = _healthy()
    hcas[0] = _hca(0, _port("mlx5_0", counters=before, counters_after=after))
    (growth,) = _by(network.check(_facts(tuple(hcas)), Policy(), H100), "network.error_growth")
    assert growth.severity is Severity.UNKNOWN
    assert "symbol_error" in growth.message


def test_a_link_down_before_it_first_came_up_is_no_flap() -> None:
    from validator.node.parsers.ib_link_flaps import parse_link_flaps

    boot = (
        "[   12.1] mlx5_core 0000:18:00.0 ibp24s0: Link down\n"
        "[   15.3] mlx5_core 0000:18:00.0 ibp24s0: Link up\n"
    )
    (flap,) = parse_link_flaps(boot)
    assert (flap.downs, flap.ups) == (0, 1)
    (flap,) = parse_link_flaps(boot + "[ 9000.0] mlx5_core 0000:18:00.0 ibp24s0: Link down\n")
    assert flap.downs == 1


def test_flaps_of_an_interface_off_the_fabric_are_not_judged() -> None:
    hcas = [_hca(i, netdevs=(f"ibp{i}s0",)) for i in range(8)]
    storage = (LinkFlap("enp1s0f0", "0000:01:00.0", downs=2, ups=2),)
    quiet = _by(network.check(_facts(tuple(hcas), storage), Policy(), H100), "network.link_flaps")
    assert all(f.severity is Severity.PASS for f in quiet)  # folded into network.ports
    fabric = (LinkFlap("ibp3s0", "0000:3a:00.0", downs=2, ups=2),)
    (flap,) = _by(network.check(_facts(tuple(hcas), fabric), Policy(), H100), "network.link_flaps")
    assert flap.severity is Severity.FAIL


def test_a_port_that_could_not_be_read_is_unknown_not_a_failed_link() -> None:
    hcas = _healthy()
    hcas[2] = _hca(2, _port("mlx5_2", state=UNREAD, phys_state=UNREAD, rate_gbps=UNREAD))
    findings = network.check(_facts(tuple(hcas)), Policy(), H100)
    (ports,) = _by(findings, "network.ports")
    assert ports.severity is Severity.UNKNOWN
    assert all(f.severity is not Severity.FAIL for f in findings), findings
