"""Physical plausibility: one table, applied by the one collector to every source.

Bundles are built from real captures in ../shared/captures (read in place, one value
edited in the copy under tmp_path); scenarios extend a built-in one from a file.
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing
from pathlib import Path
from typing import Any

import pytest

from tests.collecting import collect_capture, collect_simulated
from tests.judge.test_judge_healthy import healthy_node
from validator.error_tree import CaptureError
from validator.judge.gpudirect_policy import GpudirectPolicy
from validator.judge.policy import Policy
from validator.judge.verdict import judge_node
from validator.model import (
    ErrorCounters,
    Finding,
    GpuFacts,
    NodeFacts,
    NodeResult,
    Reason,
    Severity,
    TelemetrySample,
    Unavailable,
    Verdict,
    from_dict,
    to_dict,
)
from validator.node.parsers.smi_query import parse_smi_query
from validator.node.parsers.smi_xml import parse_smi_xml
from validator.node.physical_ranges import (
    RANGES,
    plausible,
    plausible_burn,
    plausible_facts,
    plausible_gpu,
    plausible_uptime,
)

# The A10 bundles hold no GPUDirect files (a host without an RDMA fabric): the policy says so.
NO_BURN = Policy(require_burn=False, gpudirect=GpudirectPolicy(required=False))

# ---------------------------------------------------------------- the table


def _measured_numbers(cls: type) -> set[str]:
    """The fields of ``cls`` that hold a measured int or float."""
    hints = typing.get_type_hints(cls)
    names = set()
    for item in dataclasses.fields(cls):
        options = typing.get_args(hints[item.name])
        if Unavailable in options and ({int, float} & set(options)):
            names.add(item.name)
    return names


@pytest.mark.parametrize("cls", [GpuFacts, TelemetrySample, ErrorCounters])
def test_every_measured_number_has_a_range(cls: type) -> None:
    numbers = _measured_numbers(cls)
    assert numbers, cls  # not vacuous
    assert numbers - set(RANGES) == set()


IMPLAUSIBLE = [
    ("temperature_gpu_c", -273.0),
    ("temperature_gpu_c", 151.0),
    ("temperature_gpu_c", math.nan),
    ("temperature_memory_c", math.inf),
    ("temp_slowdown_c", 201.0),
    ("temp_shutdown_c", -1.0),
    ("tlimit_margin_c", -math.inf),
    ("tlimit_slowdown_c", -4294967.0),
    ("power_draw_w", 3000.5),
    ("power_draw_w", -1.0),
    ("power_limit_enforced_w", 0.0),
    ("power_limit_max_w", 1e6),
    ("memory_total_mib", 0),
    ("memory_total_mib", 2**21),
    ("memory_used_mib", -1),
    ("ecc_volatile_uncorrected", -1),
    ("ecc_aggregate_corrected", 2**53),
    ("retired_pages_dbe", 2**64 - 1),
    ("remapped_rows_uncorrectable", -5),
    ("sm_clock_mhz", 5001),
    ("mem_clock_max_mhz", 20001),
    ("sm_clock_max_mhz", 0),
    ("pcie_gen_current", 0),
    ("pcie_gen_max", 8),
    ("pcie_width_current", 0),
    ("pcie_width_max", 64),
    ("utilization_pct", 101),
    ("uptime_s", -0.5),
    ("uptime_s", 1e12),
]


@pytest.mark.parametrize(("field", "value"), IMPLAUSIBLE, ids=[f"{f}={v}" for f, v in IMPLAUSIBLE])
def test_a_value_outside_its_range_is_an_error_fact(field: str, value: float) -> None:
    fact = plausible(field, value)
    assert isinstance(fact, Unavailable)
    assert fact.reason is Reason.ERROR
    assert fact.detail.startswith(f"implausible value {value!r} for {field}, outside ")


# Edges real GPUs report (shared captures): kept as they are.
REAL_EDGES = [
    ("sm_clock_mhz", 0),  # an idle A10: "SM : 0 MHz"
    ("mem_clock_max_mhz", 14001),  # an RTX 5090
    ("temperature_gpu_c", 17.0),  # an A10G
    ("tlimit_shutdown_c", -8.0),  # Hopper's offsets to T.Limit
    ("tlimit_max_operating_c", 0.0),
    ("power_limit_min_w", 10.0),
    ("memory_used_mib", 0),
    ("pcie_width_current", 1),
    ("uptime_s", 0.0),
]


@pytest.mark.parametrize(("field", "value"), REAL_EDGES, ids=[f"{f}={v}" for f, v in REAL_EDGES])
def test_real_edges_are_plausible(field: str, value: float) -> None:
    assert plausible(field, value) == value


def test_unmeasured_and_non_numbers_pass_through() -> None:
    missing = Unavailable(Reason.NOT_SUPPORTED, "N/A")
    assert plausible("temperature_gpu_c", missing) is missing
    assert plausible_uptime(86400.0) == 86400.0


def test_used_memory_above_the_total_cannot_be() -> None:
    gpu = plausible_gpu(GpuFacts(index=0, memory_total_mib=81559, memory_used_mib=90000))
    assert gpu.memory_total_mib == 81559
    assert gpu.memory_used_mib == Unavailable(
        Reason.ERROR,
        "implausible value 90000 for memory_used_mib, more than memory_total_mib 81559",
    )


@pytest.mark.parametrize("folder", ["nvidia-smi-q", "nvidia-smi-xml"])
def test_no_real_capture_holds_an_implausible_value(captures_dir: Path, folder: str) -> None:
    parse = parse_smi_query if folder == "nvidia-smi-q" else parse_smi_xml
    gpus = [
        gpu
        for path in sorted((captures_dir / folder).iterdir())
        if path.suffix in (".txt", ".xml")
        for gpu in parse(path.read_text(encoding="utf-8")).gpus
    ]
    assert len(gpus) >= 18  # every file holds at least one GPU
    assert [gpu for gpu in gpus if plausible_gpu(gpu) != gpu] == []


# ---------------------------------------------------------------- the burn-in's telemetry


def _burn_with_nan_temperatures() -> NodeFacts:
    """The healthy node whose GPU 0 sampler read NaN degrees and a negative counter."""
    facts = healthy_node()
    burn = facts.burn
    assert burn is not None
    first = burn.gpus[0]
    samples = tuple(
        dataclasses.replace(sample, temperature_gpu_c=math.nan) for sample in first.samples
    )
    counters = dataclasses.replace(first.counters_after, ecc_volatile_uncorrected=-1)
    broken = dataclasses.replace(first, samples=samples, counters_after=counters)
    return dataclasses.replace(facts, burn=dataclasses.replace(burn, gpus=(broken, *burn.gpus[1:])))


def test_a_nan_sample_becomes_not_measured_and_survives_the_wire() -> None:
    facts = _burn_with_nan_temperatures()
    with pytest.raises(ValueError, match="not JSON compliant"):
        json.dumps(to_dict(facts), allow_nan=False)  # what the report writer refuses
    checked = plausible_facts(facts)
    assert checked.burn is not None
    gpu = checked.burn.gpus[0]
    assert gpu.samples
    for sample in gpu.samples:
        assert isinstance(sample.temperature_gpu_c, Unavailable)
        assert sample.temperature_gpu_c.detail.startswith(
            "implausible value nan for temperature_gpu_c"
        )
    assert isinstance(gpu.counters_after.ecc_volatile_uncorrected, Unavailable)
    assert facts.burn is not None
    assert checked.burn.gpus[1:] == facts.burn.gpus[1:]  # the healthy GPUs are untouched
    text = json.dumps(to_dict(checked), allow_nan=False)
    assert from_dict(NodeFacts, json.loads(text)) == checked


def test_a_nan_temperature_trace_is_never_a_pass() -> None:
    facts = _burn_with_nan_temperatures()
    assert facts.burn is not None
    result = judge_node(dataclasses.replace(facts, burn=plausible_burn(facts.burn)), Policy())
    (thermal,) = [f for f in result.findings if f.check == "burn.thermal" and f.gpu_index == 0]
    assert thermal.severity is Severity.UNKNOWN
    assert thermal.required
    assert result.verdict is Verdict.NOT_CERTIFIED


# ---------------------------------------------------------------- a capture, one value edited

CAPTURED_AT = "2025-01-21T12:00:00+00:00"
XID79_LOG = "xid/gpud-xid79-sxid20034-nvswitch.log"  # raw stamps, the Xid 79 at 6781741 s
RIGHT_UPTIME = 6781741.0 + 2 * 86400  # the log's Xids are two days old: out of the window
A10_QUERY = "nvidia-smi-q/gls-A10-550.90.12.txt"  # absolute thresholds: slowdown at 98 C
A10_TEMP = "GPU Current Temp                  : 33 C"


def a10_bundle(
    directory: Path, captures: Path, *, temperature: str = "33 C", uptime: Any = RIGHT_UPTIME
) -> Path:
    """A real A10 node's bundle, its GPU temperature and meta.json uptime as given."""
    query = (captures / A10_QUERY).read_text(encoding="utf-8")
    assert A10_TEMP in query
    texts = {
        "nvidia-smi-q.txt": query.replace(
            A10_TEMP, f"GPU Current Temp                  : {temperature}"
        ),
        "nvidia-smi.txt": "nvidia-smi-banner/gls-A10-550.90.12.txt",
        "nvcc.txt": "nvcc/repo-ngc-test-nvcc-11.6.55.txt",
        "cudnn_version.h": "cudnn/repo-zspace-cuda12.6-cudnn_version.h-9.6.0.txt",
        "dmesg.txt": XID79_LOG,
    }
    directory.mkdir()
    for name, text in texts.items():
        content = text if name == "nvidia-smi-q.txt" else (captures / text).read_text("utf-8")
        (directory / name).write_text(content, encoding="utf-8")
    meta = {"hostname": "a10-node", "captured_at": CAPTURED_AT, "uptime_s": uptime}
    (directory / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return directory


def certify_capture(directory: Path) -> NodeResult:
    return judge_node(collect_capture(directory), NO_BURN)


def blocking(result: NodeResult) -> list[Finding]:
    """The findings that keep the node from being certified."""
    return [
        f
        for f in result.findings
        if f.severity is Severity.FAIL or (f.severity is Severity.UNKNOWN and f.required)
    ]


def test_the_real_a10_bundle_is_certified(tmp_path: Path, captures_dir: Path) -> None:
    # The base the edits below break: certified as captured.
    result = certify_capture(a10_bundle(tmp_path / "bundle", captures_dir))
    assert result.verdict is Verdict.CERTIFIED, result.summary
    (margin,) = [f for f in result.findings if f.check == "thermal.margin"]
    assert margin.observed == "65 C (33 C now, slowdown at 98 C)"


@pytest.mark.parametrize("temperature", ["-273 C", "nan C", "151 C"])
def test_an_impossible_temperature_is_not_certified(
    tmp_path: Path, captures_dir: Path, temperature: str
) -> None:
    result = certify_capture(a10_bundle(tmp_path / "bundle", captures_dir, temperature=temperature))
    reading = result.facts.gpus[0].temperature_gpu_c
    assert isinstance(reading, Unavailable)
    assert reading.reason is Reason.ERROR  # by a parser or by the plausibility pass
    assert result.verdict is Verdict.NOT_CERTIFIED
    implausible = (
        [] if temperature == "nan C" else [("inventory.readings_plausible", Severity.UNKNOWN, 0)]
    )
    assert [(f.check, f.severity, f.gpu_index) for f in blocking(result)] == [
        *implausible,
        ("thermal.margin", Severity.UNKNOWN, 0),
    ]
    assert "thermal.margin (GPU 0)" in result.summary
    assert "could not be judged" in result.summary


XID79_BURST_FAILURES = [
    ("errors.kernel_faults", "fallen_off_bus x1"),
    ("errors.sxid", "SXid 20034 x4"),
    ("errors.sxid", "SXid 20034 x1"),
    ("errors.sxid", "SXid 20034 x3"),
    ("errors.xid", "Xid 79 x1"),
]


@pytest.mark.parametrize("uptime", [1e12, -1.0], ids=["1e12", "negative"])
def test_an_impossible_uptime_windows_no_xid_out(
    tmp_path: Path, captures_dir: Path, uptime: float
) -> None:
    result = certify_capture(a10_bundle(tmp_path / "bundle", captures_dir, uptime=uptime))
    assert result.verdict is Verdict.NOT_CERTIFIED
    failed = [f for f in result.findings if f.severity is Severity.FAIL]
    # Every line of the log counts, whatever its stamp: the Xid, the fallen-off-bus fault
    # and the NVSwitch SXids of the same burst.
    assert [(f.check, f.observed) for f in failed] == XID79_BURST_FAILURES
    source = result.facts.kernel_log.source
    assert source.startswith(f"dmesg; implausible value {uptime!r} for uptime_s")
    assert source.endswith("so every Xid counts, whatever its age")


def test_a_nan_in_meta_json_is_no_json(tmp_path: Path, captures_dir: Path) -> None:
    # NaN is not JSON: meta.json is read as strictly as every document, so no uptime
    # (nor anything else) comes from it.
    directory = a10_bundle(tmp_path / "bundle", captures_dir, uptime=math.nan)
    with pytest.raises(CaptureError, match=r"meta\.json: 'uptime_s' must be a finite number"):
        collect_capture(directory)


def test_plausibility_runs_on_every_capture_fact(tmp_path: Path, captures_dir: Path) -> None:
    # Whatever a parser makes of a value, the collector's pass stands behind it.
    directory = a10_bundle(tmp_path / "bundle", captures_dir)
    query = (directory / "nvidia-smi-q.txt").read_text(encoding="utf-8")
    edited = query.replace(
        "Max Power Limit                   : 150.00 W",
        "Max Power Limit                   : 9999.00 W",
        1,
    )
    assert edited != query
    (directory / "nvidia-smi-q.txt").write_text(edited, encoding="utf-8")
    limit = collect_capture(directory).gpus[0].power_limit_max_w
    assert isinstance(limit, Unavailable)
    assert limit.reason is Reason.ERROR


# ---------------------------------------------------------------- a scenario, one value edited


def scenario_file(tmp_path: Path, **changes: Any) -> str:
    data: dict[str, Any] = {"name": "edited", "extends": "healthy-8x-h100-sxm", **changes}
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def test_an_impossible_scenario_temperature_is_not_certified(tmp_path: Path) -> None:
    name = scenario_file(tmp_path, nvml={"gpu_overrides": {"5": {"temperature_gpu_c": -273}}})
    result = judge_node(collect_simulated(name), NO_BURN)
    assert result.facts.gpus[5].temperature_gpu_c == Unavailable(
        Reason.ERROR, "implausible value -273.0 for temperature_gpu_c, outside -40..150 C"
    )
    assert result.verdict is Verdict.NOT_CERTIFIED
    assert [(f.check, f.severity, f.gpu_index) for f in blocking(result)] == [
        ("inventory.readings_plausible", Severity.UNKNOWN, 5),
        ("thermal.margin", Severity.UNKNOWN, 5),
    ]


def test_the_healthy_scenario_with_an_old_xid_is_certified(
    tmp_path: Path, captures_dir: Path
) -> None:
    log = (captures_dir / XID79_LOG).read_text(encoding="utf-8")
    name = scenario_file(
        tmp_path, host={"uptime_s": RIGHT_UPTIME}, commands={"dmesg": {"stdout": log}}
    )
    result = judge_node(collect_simulated(name), NO_BURN)
    assert result.verdict is Verdict.CERTIFIED, result.summary
    assert result.facts.kernel_log.source == "dmesg"


def test_an_impossible_scenario_uptime_counts_the_old_xid(
    tmp_path: Path, captures_dir: Path
) -> None:
    log = (captures_dir / XID79_LOG).read_text(encoding="utf-8")
    # 50 years: a number the scenario format holds (up to 100 years), no machine's uptime.
    name = scenario_file(tmp_path, host={"uptime_s": 1.6e9}, commands={"dmesg": {"stdout": log}})
    result = judge_node(collect_simulated(name), NO_BURN)
    assert result.verdict is Verdict.NOT_CERTIFIED
    failed = [f for f in result.findings if f.severity is Severity.FAIL]
    # Every line of the log counts, whatever its stamp: the Xid, the fallen-off-bus fault
    # and the NVSwitch SXids of the same burst.
    assert [(f.check, f.observed) for f in failed] == XID79_BURST_FAILURES
    assert result.facts.kernel_log.source == (
        "dmesg; implausible value 1600000000.0 for uptime_s, outside 0..631152000 s, "
        "so every Xid counts, whatever its age"
    )
