"""Physical plausibility of measured figures: burn speed, bandwidths and power against physics.

A figure above what the hardware can do (a burn faster than the SKU's dense peak, a copy
faster than its link, a draw above the board's maximum) is no measurement: it blocks
certification with a required UNKNOWN that names it, and never enters a fleet median.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path

import pytest

from tests.interconnect_samples import healthy_interconnect
from tests.judge.test_judge_healthy import healthy_node, judge, with_gpu, with_gpu_burn
from validator.judge import Policy
from validator.judge.catalog import load_catalog
from validator.judge.checks.figures import CHECK
from validator.judge.figure_ceilings import ceilings, screen
from validator.judge.fleet import CHECK as FLEET_CHECK
from validator.judge.fleet import judge_fleet
from validator.model import (
    AllReducePoint,
    Bandwidth,
    Finding,
    NodeFacts,
    NodeResult,
    Severity,
    Verdict,
    implausible_reading,
    to_dict,
)
from validator.packed import agent_facts

UNKNOWN = Severity.UNKNOWN
H100 = load_catalog().get("h100-sxm")


def implausible(result: NodeResult) -> list[Finding]:
    return [f for f in result.findings if f.check == CHECK]


def blocking(finding: Finding) -> bool:
    return finding.severity in (Severity.UNKNOWN, Severity.FAIL) and finding.required


def with_copy(facts: NodeFacts, index: int, **figures: float) -> NodeFacts:
    ic = facts.interconnect
    assert ic is not None
    assert isinstance(ic.gpus, tuple)
    gpus = tuple(
        dataclasses.replace(c, **{k: Bandwidth(v) for k, v in figures.items()})
        if c.index == index
        else c
        for c in ic.gpus
    )
    return dataclasses.replace(facts, interconnect=dataclasses.replace(ic, gpus=gpus))


# ---------------------------------------------------------------- burn speed


def test_ten_thousand_tflops_is_not_certified_and_named() -> None:
    result = judge(with_gpu_burn(healthy_node(), 2, tflops=10_000.0))
    assert result.verdict is not Verdict.CERTIFIED
    (finding,) = implausible(result)
    assert blocking(finding)
    assert finding.gpu_index == 2
    assert "10000" in finding.message
    assert "TFLOPS" in finding.message
    assert "989.4" in finding.message  # the peak it is held to
    # The speed check says "not measured", not PASS.
    speeds = [f for f in result.findings if f.check == "burn.speed" and f.gpu_index == 2]
    assert [f.severity for f in speeds] == [UNKNOWN]


def test_just_within_five_percent_of_peak_is_a_measurement() -> None:
    result = judge(with_gpu_burn(healthy_node(), 2, tflops=989.4 * 1.049))
    assert implausible(result) == []


def test_an_implausible_gpu_does_not_make_its_siblings_stragglers() -> None:
    result = judge(with_gpu_burn(healthy_node(), 0, tflops=10_000.0))
    relative = [f for f in result.findings if f.check == "burn.speed_relative" and f.gpu_index != 0]
    assert relative
    assert all(f.severity is Severity.PASS for f in relative)


@pytest.mark.parametrize(
    "value",
    [float("nan"), float("inf"), -720.0, 0.0, 720_000.0],
    ids=["nan", "inf", "negative", "zero", "gflops-as-tflops"],
)
def test_impossible_tflops_block(value: float) -> None:
    result = judge(with_gpu_burn(healthy_node(), 5, tflops=value))
    assert result.verdict is not Verdict.CERTIFIED
    (finding,) = implausible(result)
    assert finding.gpu_index == 5
    assert blocking(finding)


def test_unknown_sku_is_held_to_the_fastest_sku_for_the_dtype() -> None:
    facts = healthy_node()
    facts = dataclasses.replace(
        facts, gpus=tuple(dataclasses.replace(g, name="NVIDIA Future GPU") for g in facts.gpus)
    )
    fastest = max(v for sku in load_catalog().all() if (v := sku.peak_tflops.bf16) is not None)
    result = judge(with_gpu_burn(facts, 1, tflops=fastest * 1.2))
    assert [f.gpu_index for f in implausible(result)] == [1]
    fine = judge(with_gpu_burn(facts, 1, tflops=fastest))
    assert implausible(fine) == []


# ---------------------------------------------------------------- bandwidth and power


@pytest.mark.parametrize(
    ("figure", "value"),
    [("h2d", 500.0), ("d2h", 64.5), ("hbm", 20_000.0), ("h2d", 54_000.0)],
    ids=["h2d-above-gen5-x16", "d2h-just-above", "hbm-above-datasheet", "mb-s-as-gb-s"],
)
def test_copy_above_its_link_is_not_a_measurement(figure: str, value: float) -> None:
    facts = with_copy(healthy_node(), 4, **{figure: value})
    result = judge(facts)
    assert result.verdict is not Verdict.CERTIFIED
    (finding,) = implausible(result)
    assert finding.gpu_index == 4
    assert blocking(finding)
    assert figure.upper() in finding.message


def test_a_healthy_gen5_copy_is_within_its_link() -> None:
    bound = ceilings(healthy_node(), H100, load_catalog())
    assert 55.0 < bound.host_copy.value < 70.0  # Gen5 x16: 63 GB/s each way


def test_peer_copy_above_nvlink_is_not_a_measurement() -> None:
    facts = healthy_node()
    ic = facts.interconnect
    assert ic is not None
    assert isinstance(ic.peers, tuple)
    peers = tuple(
        dataclasses.replace(p, unidirectional=Bandwidth(5000.0)) if (p.src, p.dst) == (3, 6) else p
        for p in ic.peers
    )
    result = judge(dataclasses.replace(facts, interconnect=dataclasses.replace(ic, peers=peers)))
    assert result.verdict is not Verdict.CERTIFIED
    assert [f.gpu_index for f in implausible(result)] == [3]


def test_all_reduce_busbw_above_the_fabric_is_not_a_measurement() -> None:
    facts = healthy_node()
    ic = facts.interconnect
    assert ic is not None
    assert not isinstance(ic.all_reduce, type(None))
    run = ic.all_reduce
    assert not implausible_reading(run)
    forged = dataclasses.replace(
        run,  # type: ignore[type-var]
        points=(AllReducePoint(1 << 32, 100.0, 5000.0, 8750.0),),
    )
    result = judge(
        dataclasses.replace(facts, interconnect=dataclasses.replace(ic, all_reduce=forged))
    )
    assert result.verdict is not Verdict.CERTIFIED
    (finding,) = implausible(result)
    assert finding.gpu_index is None
    assert "busbw" in finding.message


def test_nvls_all_reduce_above_one_directions_links_is_real() -> None:
    # 8x H200 measure ~486 GB/s busbw with NVLink SHARP, above the 450 GB/s one way.
    facts = healthy_node()
    ic = facts.interconnect
    assert ic is not None
    real = dataclasses.replace(
        ic.all_reduce,  # type: ignore[type-var]
        points=(AllReducePoint(17179869184, 66226.0, 259.41, 486.49),),
    )
    result = judge(
        dataclasses.replace(facts, interconnect=dataclasses.replace(ic, all_reduce=real))
    )
    assert implausible(result) == []


def test_burn_power_above_the_board_maximum_is_not_a_measurement() -> None:
    facts = healthy_node()
    assert facts.burn is not None
    gpu = facts.burn.gpus[6]
    samples = tuple(dataclasses.replace(s, power_w=2000.0) for s in gpu.samples)
    result = judge(with_gpu_burn(facts, 6, samples=samples))
    assert result.verdict is not Verdict.CERTIFIED
    (finding,) = implausible(result)
    assert finding.gpu_index == 6
    assert blocking(finding)
    assert "2000" in finding.message
    assert "700" in finding.message


def test_idle_power_draw_above_the_board_maximum_is_not_a_measurement() -> None:
    # A reading of the GPU itself: named with its other readings.
    result = judge(with_gpu(healthy_node(), 1, power_draw_w=1500.0))
    assert result.verdict is not Verdict.CERTIFIED
    named = [f for f in result.findings if f.check == "inventory.readings_plausible"]
    assert [f.gpu_index for f in named] == [1]
    assert blocking(named[0])
    assert "1500" in named[0].message
    assert "700 W" in named[0].message


def test_a_reading_at_the_limit_with_jitter_is_real() -> None:
    facts = healthy_node()
    assert facts.burn is not None
    samples = tuple(dataclasses.replace(s, power_w=712.0) for s in facts.burn.gpus[0].samples)
    assert implausible(judge(with_gpu_burn(facts, 0, samples=samples))) == []


def _highest_instant_draw(trace: str) -> float:
    """The highest power.draw.instant of a recorded nvidia-smi CSV log (read in place)."""
    path = Path(__file__).parent.parent / "fixtures" / "telemetry" / trace
    with path.open(encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    column = [name.strip() for name in rows[0]].index("power.draw.instant [W]")
    return max(
        float(row[column].split()[0]) for row in rows[1:] if row[column].strip()[:1].isdigit()
    )


@pytest.mark.parametrize(
    ("trace", "sku"),
    [
        ("h800-sxm-gemm-idle-load-at-power-cap-idle.csv", "h100-sxm"),  # the same 700 W board
        ("h100-pcie-350w-gemm-lms1-idle-to-power-cap.csv", "h100-pcie"),
    ],
)
def test_a_real_instantaneous_overshoot_is_a_measurement(trace: str, sku: str) -> None:
    # Instantaneous readings overshoot the limit by up to 30% in these recordings.
    draw = _highest_instant_draw(trace)
    board = load_catalog().get(sku)
    assert draw > 1.1 * board.default_power_w  # the overshoot the margin must keep
    facts = healthy_node()
    assert facts.burn is not None
    gpus = tuple(
        dataclasses.replace(
            g, samples=tuple(dataclasses.replace(s, power_w=draw) for s in g.samples)
        )
        for g in facts.burn.gpus
    )
    facts = dataclasses.replace(facts, burn=dataclasses.replace(facts.burn, gpus=gpus))
    _, found = screen(facts, board, load_catalog())
    assert [item for item in found if "power" in item.figure] == []


def test_plausible_tflops_with_an_idle_gpu_is_not_certified() -> None:
    facts = healthy_node()
    assert facts.burn is not None
    idle = tuple(
        dataclasses.replace(s, power_w=70.0, utilization_pct=0, sm_clock_mhz=345)
        for s in facts.burn.gpus[3].samples
    )
    result = judge(with_gpu_burn(facts, 3, samples=idle))
    assert result.verdict is Verdict.NOT_CERTIFIED
    power = [f for f in result.findings if f.check == "burn.power" and f.gpu_index == 3]
    assert power
    assert all(blocking(f) for f in power)


def test_the_healthy_node_has_no_implausible_figure() -> None:
    result = judge(healthy_node(interconnect=healthy_interconnect()))
    assert implausible(result) == []
    assert result.verdict is Verdict.CERTIFIED


# ---------------------------------------------------------------- fleet


def fleet_node(hostname: str, tflops: tuple[float, ...]) -> NodeResult:
    """A judged node with one burn figure per GPU (8 GPUs unless fewer are given)."""
    facts = healthy_node(hostname=hostname)
    assert facts.burn is not None
    gpus = tuple(
        dataclasses.replace(g, tflops=value, tflops_windows=(value,) * 5)
        for g, value in zip(facts.burn.gpus, tflops)
    )
    facts = dataclasses.replace(
        facts,
        gpus=facts.gpus[: len(tflops)],
        pci_gpu_count=len(tflops),
        burn=dataclasses.replace(facts.burn, gpus=gpus),
        interconnect=None,
    )
    return judge(facts, Policy(interconnect=False))


def fleet_of(result: NodeResult) -> list[Finding]:
    return [f for f in result.findings if f.check == FLEET_CHECK]


HONEST = (712.0, 715.0, 709.0, 711.0, 714.0, 710.0, 713.0, 712.0)


def test_two_node_fleet_a_990_node_does_not_fail_the_honest_one() -> None:
    results, summary = judge_fleet(
        [fleet_node("honest", HONEST), fleet_node("liar", (990.0,) * 8)], Policy()
    )
    assert all(f.severity is not Severity.FAIL for f in fleet_of(results[0]))
    assert summary.skus == ()  # two nodes are no fleet


def test_three_node_fleet_a_990_node_does_not_fail_the_honest_ones() -> None:
    results, summary = judge_fleet(
        [fleet_node("a", HONEST), fleet_node("b", HONEST), fleet_node("liar", (990.0,) * 8)],
        Policy(),
    )
    for honest in results[:2]:
        assert fleet_of(honest)
        assert all(f.severity is Severity.PASS for f in fleet_of(honest))
    assert summary.skus[0].median_tflops == pytest.approx(712.0)


def test_an_implausible_node_is_left_out_of_the_fleet_median() -> None:
    results, summary = judge_fleet(
        [
            fleet_node("a", HONEST),
            fleet_node("b", HONEST),
            fleet_node("c", HONEST),
            fleet_node("liar", (10_000.0,) * 8),
        ],
        Policy(),
    )
    assert fleet_of(results[3]) == []
    assert results[3].verdict is Verdict.NOT_CERTIFIED
    (stats,) = summary.skus
    assert stats.gpus == 24
    assert stats.median_tflops == pytest.approx(712.0)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -5.0])
def test_a_non_finite_or_negative_figure_never_enters_the_fleet(value: float) -> None:
    odd = (value, *HONEST[1:])
    results, summary = judge_fleet(
        [fleet_node("a", HONEST), fleet_node("b", HONEST), fleet_node("c", odd)], Policy()
    )
    assert 0 not in {f.gpu_index for f in fleet_of(results[2])}
    assert math.isfinite(summary.skus[0].median_tflops)


def test_one_node_holding_half_the_gpus_does_not_set_the_median() -> None:
    # A fast 8-GPU node beside four 2-GPU nodes: a median over GPUs is the average of
    # the two camps (856) and fails every honest GPU; one figure per node keeps 712.
    results, summary = judge_fleet(
        [fleet_node("big", (1000.0,) * 8)]
        + [fleet_node(f"small{n}", (712.0, 712.0)) for n in range(4)],
        Policy(),
    )
    for small in results[1:]:
        assert fleet_of(small)
        assert all(f.severity is Severity.PASS for f in fleet_of(small))
    assert summary.skus[0].median_tflops == pytest.approx(712.0)


def test_one_slow_node_holding_half_the_gpus_is_caught() -> None:
    # 90% of its siblings: a GPU median of 676 would pass it at 93%.
    results, _ = judge_fleet(
        [fleet_node("big", (640.0,) * 8)]
        + [fleet_node(f"small{n}", (712.0, 712.0)) for n in range(4)],
        Policy(),
    )
    assert all(f.severity is Severity.FAIL for f in fleet_of(results[0]))
    assert results[0].verdict is Verdict.NOT_CERTIFIED


def test_three_gpus_on_one_node_are_no_fleet() -> None:
    results, summary = judge_fleet([fleet_node("one", (712.0, 710.0, 500.0))], Policy())
    assert fleet_of(results[0]) == []
    assert summary.skus == ()


# ---------------------------------------------------------------- forged agent output


@pytest.mark.parametrize(
    ("field", "value"),
    [("tflops", 10_000.0), ("tflops", 720_000.0), ("tflops", -720.0), ("power_w", 7000.0)],
    ids=["10000-tflops", "gflops-as-tflops", "negative-tflops", "power-in-deciwatts"],
)
def test_forged_agent_output_is_not_certified(field: str, value: float) -> None:
    """What an agent prints, edited on the way (a spool file, a wrapper script)."""
    document = to_dict(healthy_node())
    gpu = document["burn"]["gpus"][3]
    if field == "tflops":
        gpu["tflops"] = value
    else:
        for sample in gpu["samples"]:
            sample["power_w"] = value
    result = judge(agent_facts(json.dumps(document)))
    assert result.verdict is not Verdict.CERTIFIED
    assert [f.gpu_index for f in implausible(result)] == [3]


@pytest.mark.parametrize("dtype", ["bf16x", "__class__", "__doc__", "peak_tflops", ""])
def test_a_forged_burn_dtype_is_not_certified_nor_a_crash(dtype: str) -> None:
    """A dtype no GPU burns has no peak to be held to: no speed of it can be plausible."""
    document = to_dict(healthy_node())
    document["burn"]["dtype"] = dtype
    for gpu in document["burn"]["gpus"]:
        gpu["tflops"] = 10_000.0
    result = judge(agent_facts(json.dumps(document)))
    assert result.verdict is not Verdict.CERTIFIED
    assert [f.gpu_index for f in implausible(result)] == list(range(8))
    assert all(blocking(f) for f in implausible(result))


# ---------------------------------------------------------------- drift


def test_drift_does_not_take_a_speed_beyond_the_peak_as_unchanged() -> None:
    from tests.drift.test_drift import baseline, with_burn
    from validator.drift import drift_node

    result = drift_node(with_burn(10_000.0), baseline(), Policy())
    assert result.verdict is not Verdict.CERTIFIED
    (burn,) = [f for f in result.findings if f.check == "drift.burn" and f.gpu_index == 4]
    assert burn.severity is UNKNOWN
    assert "10000" in burn.message
    assert "989.4" in burn.message
