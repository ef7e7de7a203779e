"""The nvidia-smi CSV telemetry-log parser against real recorded logs and small inline cases.

Real logs: tests/fixtures/telemetry (sources in its SOURCES.md) and the single-snapshot
``--query-gpu`` captures in ../shared/captures/nvidia-smi-csv, read in place. Every figure
asserted below was read off those files. Inline cases are written by hand and say so; they
are the only place HW slowdown and power-brake rows appear, since no published log with
them was found.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from validator.model import NOT_MEASURED, NOT_SUPPORTED, Reason, TelemetrySample, Unavailable
from validator.node.parsers.base import ParseError
from validator.node.parsers.smi_csv_log import TelemetryLog, parse_query_gpu_log

FIXTURES = Path(__file__).parent.parent / "fixtures" / "telemetry"


def _fixture(name: str) -> TelemetryLog:
    return parse_query_gpu_log((FIXTURES / name).read_text(encoding="utf-8"))


def _all(log: TelemetryLog) -> list[TelemetrySample]:
    return [sample for samples in log.samples.values() for sample in samples]


def test_every_fixture_is_listed_in_sources() -> None:
    sources = (FIXTURES / "SOURCES.md").read_text(encoding="utf-8")
    names = sorted(path.name for path in FIXTURES.glob("*.csv"))
    assert len(names) == 8
    for name in names:
        assert f"`{name}`" in sources, name


# --- real logs: 8x H100, no GPU column -------------------------------------------------


def test_h100x8_first_polls_by_position_though_timestamps_differ() -> None:
    log = _fixture("h100-8x-training-first-polls.csv")
    assert sorted(log.samples) == list(range(8))
    assert {len(samples) for samples in log.samples.values()} == {20}
    assert log.bus_ids == {}
    assert log.columns == ("timestamp", "power.draw", "utilization.gpu", "memory.used")
    # The first poll's rows are stamped .703 .. .716: still one row per GPU.
    firsts = [log.samples[gpu][0] for gpu in range(8)]
    assert [s.power_w for s in firsts] == [69.32, 72.45, 72.11, 72.03, 72.22, 72.0, 70.35, 71.55]
    assert [s.t_s for s in firsts] == [0.0, 0.003, 0.005, 0.007, 0.008, 0.01, 0.012, 0.013]
    # Line 138: GPU 0 stamped 23:32:11.425, GPUs 1-7 of the same poll 23:32:12.107.
    assert (log.samples[0][17].t_s, log.samples[0][17].power_w) == (1.722, 69.36)
    assert (log.samples[1][17].t_s, log.samples[1][17].power_w) == (2.404, 72.5)
    assert all(s.utilization_pct == 0 for s in _all(log))
    assert all(s.sm_clock_mhz == NOT_MEASURED for s in _all(log))
    assert all(s.clock_event_reasons == NOT_MEASURED for s in _all(log))


def test_h100x8_ramp_from_idle_to_training_load() -> None:
    log = _fixture("h100-8x-training-ramp-to-load.csv")
    assert sorted(log.samples) == list(range(8))
    assert {len(samples) for samples in log.samples.values()} == {100}
    first = [log.samples[gpu][0].power_w for gpu in range(8)]
    assert first == [117.11, 123.33, 123.57, 122.88, 122.62, 121.95, 117.83, 120.52]
    last = [log.samples[gpu][-1] for gpu in range(8)]
    assert [s.power_w for s in last] == [
        535.82,
        559.09,
        550.71,
        539.36,
        541.46,
        552.77,
        546.24,
        540.38,
    ]
    assert [s.utilization_pct for s in last] == [94, 89, 94, 97, 95, 97, 92, 90]
    assert log.samples[0][-1].t_s == 10.108
    # From poll 45 (line 8762) every GPU is above 500 W; the peak in the slice is 567.97 W.
    assert all(log.samples[gpu][poll].power_w > 500 for gpu in range(8) for poll in range(45, 100))
    assert not all(log.samples[gpu][44].power_w > 500 for gpu in range(8))
    assert max(s.power_w for s in _all(log)) == 567.97


def test_h100x8_checkpoint_full_utilization_at_low_power_then_idle() -> None:
    log = _fixture("h100-8x-training-checkpoint-and-idle-tail.csv")
    first = [log.samples[gpu][0] for gpu in range(8)]
    assert [(s.power_w, s.utilization_pct) for s in first[:2]] == [(146.77, 4), (158.49, 100)]
    assert all(s.utilization_pct == 100 for s in first[1:])
    assert all(s.power_w < 160 for s in first)
    last = [log.samples[gpu][-1] for gpu in range(8)]
    assert [s.power_w for s in last] == [71.15, 74.89, 73.66, 73.39, 73.67, 74.14, 71.69, 74.11]
    assert all(s.utilization_pct == 0 for s in last)
    assert max(s.power_w for s in _all(log)) == 576.78


def test_h100x8_log_with_a_row_missing_is_refused() -> None:
    # Without a GPU column, rows are told apart by their place in the poll; a log missing a
    # row (here GPU 0's row of the first poll, removed by the test) must not be read with
    # every later row shifted onto the wrong GPU.
    text = (FIXTURES / "h100-8x-training-ramp-to-load.csv").read_text(encoding="utf-8")
    lines = text.split("\n")
    shifted = "\n".join([lines[0], *lines[2:]])  # drop GPU 0's row of the first poll
    with pytest.raises(ParseError, match=r"line \d+: 8 rows share timestamp .* GPU position 7"):
        parse_query_gpu_log(shifted)


# --- real logs: single datacenter GPUs --------------------------------------------------


def test_h800_idle_load_at_power_cap_idle() -> None:
    log = _fixture("h800-sxm-gemm-idle-load-at-power-cap-idle.csv")
    assert list(log.samples) == [0]  # no index column: GPUs by uuid, one here
    samples = log.samples[0]
    assert len(samples) == 159
    assert samples[0].power_w == 74.02
    assert samples[0].clock_event_reasons == ("gpu_idle",)
    assert (samples[0].temperature_gpu_c, samples[0].temperature_memory_c) == (37.0, 43.0)
    assert (samples[0].sm_clock_mhz, samples[0].mem_clock_mhz) == (885, 2619)
    # Line 83: the peak, 702.81 W at 100 % with the SW power cap.
    peak = samples[81]
    assert (peak.power_w, peak.utilization_pct, peak.sm_clock_mhz) == (702.81, 100, 1905)
    assert peak.clock_event_reasons == ("sw_power_cap",)
    assert peak.t_s == 79.611
    # Lines 82-105 are the capped run; idle (0x1) before and after, 0x0 in between.
    reasons = [s.clock_event_reasons for s in samples]
    assert reasons[80:104] == [("sw_power_cap",)] * 24
    assert reasons.count(("sw_power_cap",)) == 24
    assert reasons.count(("gpu_idle",)) == 88
    assert reasons.count(()) == 47
    assert samples[-1].power_w == 73.66
    assert samples[-1].clock_event_reasons == ("gpu_idle",)
    assert "clocks_event_reasons.hw_power_brake_slowdown" in log.columns
    assert "fan.speed" in log.columns  # "fan.speed [%]" with its unit stripped


def test_h100_pcie_prefers_averaged_power_draw_over_instant() -> None:
    log = _fixture("h100-pcie-350w-gemm-lms1-idle-to-power-cap.csv")
    samples = log.samples[0]
    assert len(samples) == 1000
    assert (samples[0].power_w, samples[0].sm_clock_mhz, samples[0].utilization_pct) == (
        56.15,
        345,
        0,
    )
    assert (samples[0].temperature_gpu_c, samples[0].temperature_memory_c) == (59.0, 69.0)
    # Line 722: power.draw 148.33 W while power.draw.instant says 368.25 W.
    assert (samples[720].power_w, samples[720].utilization_pct) == (148.33, 85)
    assert samples[720].t_s == 5.454
    assert (samples[-1].power_w, samples[-1].sm_clock_mhz, samples[-1].utilization_pct) == (
        348.08,
        870,
        100,
    )
    assert max(s.power_w for s in samples) == 367.71
    assert max(s.sm_clock_mhz for s in samples[:720]) == 1755
    assert min(s.sm_clock_mhz for s in samples[720:]) == 780


def test_a100x8_sw_thermal_slowdown_by_uuid() -> None:
    log = _fixture("a100-80gb-8x-gpt-training-sw-thermal-slowdown.csv")
    assert sorted(log.samples) == list(range(8))
    assert {len(samples) for samples in log.samples.values()} == {50}
    firsts = [log.samples[gpu][0] for gpu in range(8)]
    assert [s.sm_clock_mhz for s in firsts] == [930, 210, 1305, 690, 930, 540, 255, 1095]
    assert (firsts[0].power_w, firsts[0].temperature_gpu_c, firsts[0].temperature_memory_c) == (
        103.47,
        84.0,
        89.0,
    )
    throttled = [s for s in _all(log) if s.clock_event_reasons == ("sw_thermal_slowdown",)]
    assert len(throttled) == 394
    free = [s for s in _all(log) if s.clock_event_reasons == ()]
    assert len(free) == 6
    assert {s.sm_clock_mhz for s in free} == {1410}  # throttle off exactly at full clocks
    # Line 29: GPU 3 (first seen on line 5) at 1410 MHz, nothing active.
    assert log.samples[3][3].clock_event_reasons == ()
    assert log.samples[3][3].power_w == 159.96
    assert all(s.utilization_pct == 100 for s in _all(log))
    assert min(s.temperature_gpu_c for s in _all(log)) == 83.0
    assert max(s.temperature_gpu_c for s in _all(log)) == 86.0


def test_a100x8_healthy_baseline_of_the_same_machine() -> None:
    healthy = _fixture("a100-80gb-8x-gpt-training-healthy.csv")
    hot = _fixture("a100-80gb-8x-gpt-training-sw-thermal-slowdown.csv")
    assert sorted(healthy.samples) == list(range(8))
    assert {s.clock_event_reasons for s in _all(healthy)} == {()}
    assert max(s.temperature_gpu_c for s in _all(healthy)) == 70.0
    assert min(s.sm_clock_mhz for s in _all(healthy)) == 1290
    assert [healthy.samples[gpu][0].sm_clock_mhz for gpu in range(8)] == [
        1365,
        1395,
        1380,
        1395,
        1410,
        1395,
        1395,
        1410,
    ]
    # Same eight UUIDs, first seen in the same order, in both logs.
    assert healthy.columns.index("uuid") == hot.columns.index("uuid") == 1
    uuids = [
        [row.split(", ")[1] for row in (FIXTURES / name).read_text().split("\n")[1:9]]
        for name in (
            "a100-80gb-8x-gpt-training-healthy.csv",
            "a100-80gb-8x-gpt-training-sw-thermal-slowdown.csv",
        )
    ]
    assert uuids[0] == uuids[1]
    assert uuids[0][0] == "GPU-00ea7332-dd3b-f4f6-8c27-bc16d1534b1e"


def test_a100_pcie_nounits_under_a_script_written_header() -> None:
    log = _fixture("a100-pcie-40gb-nounits-script-header.csv")
    assert list(log.samples) == [0]
    samples = log.samples[0]
    assert len(samples) == 60
    assert "clocks.sm" in log.columns
    assert "clocks.mem" in log.columns
    first, last = samples[0], samples[-1]
    assert (first.power_w, first.temperature_gpu_c, first.utilization_pct) == (36.02, 25.0, 0)
    assert (first.sm_clock_mhz, first.mem_clock_mhz) == (210, 1215)
    assert (last.t_s, last.power_w, last.sm_clock_mhz) == (59.304, 37.89, 765)
    assert first.temperature_memory_c == NOT_MEASURED  # no such column
    assert first.clock_event_reasons == NOT_MEASURED


# --- the shared single-snapshot captures, read in place ---------------------------------

# file stem -> (bus id, power W, SM MHz, memory MHz, utilization, reasons)
_CAPTURES: dict[str, tuple[str, float, int, int, object, object]] = {
    "nge-linux-h100-80gb-hbm3-590.48.01__querygpu-idle": (
        "00000000:00:09.0",
        69.85,
        345,
        2619,
        0,
        ("gpu_idle",),
    ),
    "nge-linux-h100-80gb-hbm3-590.48.01__querygpu-load": (
        "00000000:00:09.0",
        631.95,
        1980,
        2619,
        100,
        (),
    ),
    "nge-linux-h100-mig-590.48.01__querygpu-idle": (
        "00000000:00:09.0",
        71.15,
        345,
        2619,
        NOT_MEASURED,
        ("gpu_idle",),
    ),
    "nge-linux-h100-mig-590.48.01__querygpu-load": (
        "00000000:00:09.0",
        433.78,
        1980,
        2619,
        NOT_MEASURED,
        (),
    ),
    "nge-linux-h200-590.48.01__querygpu-idle": (
        "00000000:83:00.0",
        77.71,
        345,
        3201,
        0,
        ("gpu_idle",),
    ),
    "nge-linux-h200-590.48.01__querygpu-load": ("00000000:83:00.0", 627.4, 1980, 3201, 100, ()),
    "nge-linux-h200-mig-590.48.01__querygpu-idle": (
        "00000000:83:00.0",
        78.28,
        345,
        3201,
        NOT_MEASURED,
        ("gpu_idle",),
    ),
    "nge-linux-h200-mig-590.48.01__querygpu-load": (
        "00000000:83:00.0",
        295.01,
        1980,
        3201,
        NOT_MEASURED,
        (),
    ),
    "nge-linux-l40s-595.80__querygpu-idle": ("00000000:01:00.0", 144.97, 2520, 9001, 100, ()),
    "nge-linux-l40s-595.80__querygpu-load": ("00000000:01:00.0", 110.23, 2520, 9001, 9, ()),
    "nge-linux-rtx-2080-super-595.71.05__querygpu-idle": (
        "00000000:0C:00.0",
        39.32,
        765,
        810,
        0,
        ("sw_power_cap",),
    ),
    "nge-linux-rtx-2080-super-595.71.05__querygpu-load": (
        "00000000:0C:00.0",
        111.5,
        2055,
        7500,
        8,
        (),
    ),
    "nge-linux-rtx-2080-super-610.57.04__querygpu-idle": (
        "00000000:0C:00.0",
        39.17,
        765,
        810,
        0,
        ("gpu_idle",),
    ),
    "nge-linux-rtx-2080-super-610.57.04__querygpu-load": (
        "00000000:0C:00.0",
        98.14,
        2070,
        7500,
        8,
        (),
    ),
    "nge-linux-rtx-4080-super-595.71.05__querygpu-idle": (
        "00000000:01:00.0",
        26.2,
        210,
        405,
        0,
        ("gpu_idle",),
    ),
    "nge-linux-rtx-4080-super-595.71.05__querygpu-load": (
        "00000000:01:00.0",
        84.24,
        2805,
        11251,
        7,
        (),
    ),
    "nge-windows-rtx-2080-super-591.86__querygpu-idle": (
        "00000000:0C:00.0",
        38.92,
        300,
        405,
        0,
        ("gpu_idle",),
    ),
    "nge-windows-rtx-2080-super-591.86__querygpu-load": (
        "00000000:0C:00.0",
        97.43,
        2055,
        7500,
        7,
        ("gpu_idle",),
    ),
    "nge-windows-rtx-2080-super-610.62__querygpu-idle": (
        "00000000:0C:00.0",
        39.25,
        300,
        405,
        0,
        ("gpu_idle",),
    ),
    "nge-windows-rtx-2080-super-610.62__querygpu-load": (
        "00000000:0C:00.0",
        97.99,
        2040,
        7500,
        7,
        (),
    ),
}


def test_every_querygpu_capture_is_covered(captures_dir: Path) -> None:
    found = {path.stem for path in (captures_dir / "nvidia-smi-csv").glob("*querygpu*")}
    assert found == set(_CAPTURES)


@pytest.mark.parametrize("stem", sorted(_CAPTURES))
def test_querygpu_capture(stem: str, captures_dir: Path) -> None:
    text = (captures_dir / "nvidia-smi-csv" / f"{stem}.txt").read_text(encoding="utf-8")
    log = parse_query_gpu_log(text)
    bus_id, power, sm, mem, util, reasons = _CAPTURES[stem]
    assert list(log.samples) == [0]
    (sample,) = log.samples[0]
    assert log.bus_ids == {0: bus_id}
    assert sample.t_s == 0.0
    assert sample.power_w == power
    assert (sample.sm_clock_mhz, sample.mem_clock_mhz) == (sm, mem)
    assert sample.utilization_pct == util
    assert sample.clock_event_reasons == reasons
    assert len(log.columns) > 200
    assert "power.draw" in log.columns
    assert "clocks_event_reasons_counters.sw_power_cap" in log.columns


def test_l40s_capture_memory_temperature_is_bare_na(captures_dir: Path) -> None:
    text = (captures_dir / "nvidia-smi-csv/nge-linux-l40s-595.80__querygpu-load.txt").read_text()
    (sample,) = parse_query_gpu_log(text).samples[0]
    assert sample.temperature_gpu_c == 54.0
    assert sample.temperature_memory_c == NOT_MEASURED


# --- inline cases (written by hand, not recorded) ---------------------------------------

_HEADER = "timestamp, index, power.draw [W], clocks.sm [MHz], utilization.gpu [%]"


def _one(text: str, gpu: int = 0) -> TelemetrySample:
    return parse_query_gpu_log(text).samples[gpu][0]


def test_header_with_units_and_values_with_units() -> None:
    log = parse_query_gpu_log(f"{_HEADER}\n2024/10/25 11:21:22.123, 0, 245.33 W, 1980 MHz, 100 %\n")
    assert log.columns == ("timestamp", "index", "power.draw", "clocks.sm", "utilization.gpu")
    sample = log.samples[0][0]
    assert (sample.power_w, sample.sm_clock_mhz, sample.utilization_pct) == (245.33, 1980, 100)
    assert isinstance(sample.sm_clock_mhz, int)


def test_header_without_units_and_nounits_values() -> None:
    text = (
        "timestamp, index, power.draw, clocks.sm, utilization.gpu\n"
        "2024/10/25 11:21:22, 0, 245.33, 1980, 100\n"
    )
    sample = _one(text)
    assert (sample.power_w, sample.sm_clock_mhz, sample.utilization_pct) == (245.33, 1980, 100)


def test_noheader_log_is_refused_naming_the_header() -> None:
    with pytest.raises(ParseError, match=r"line 1: .*header.*noheader"):
        parse_query_gpu_log("2024/10/25 11:21:22.123, 0, 245.33 W, 1980 MHz, 100 %\n")


def test_placeholders_become_unavailable_with_their_reason() -> None:
    header = (
        "timestamp, power.draw [W], temperature.gpu, temperature.memory, clocks.sm [MHz], "
        "clocks.mem [MHz], utilization.gpu [%]"
    )
    row = "2024/10/25 11:21:22.123, [Not Supported], [N/A], N/A, [Unknown Error], , 50 %"
    sample = _one(f"{header}\n{row}\n")
    assert sample.power_w == NOT_SUPPORTED
    assert sample.temperature_gpu_c == NOT_MEASURED
    assert sample.temperature_memory_c == NOT_MEASURED
    assert isinstance(sample.sm_clock_mhz, Unavailable)
    assert sample.sm_clock_mhz.reason == Reason.ERROR
    assert isinstance(sample.mem_clock_mhz, Unavailable)
    assert sample.mem_clock_mhz.reason == Reason.NOT_MEASURED
    assert sample.mem_clock_mhz.detail == "empty cell"
    assert sample.utilization_pct == 50


def test_other_error_placeholders() -> None:
    header = "timestamp, power.draw [W], clocks.sm [MHz], utilization.gpu [%]"
    row = "2024/10/25 11:21:22.123, [Insufficient Permissions], [GPU is lost], ERR!"
    sample = _one(f"{header}\n{row}\n")
    assert isinstance(sample.power_w, Unavailable)
    assert sample.power_w.reason == Reason.NO_PERMISSION
    assert isinstance(sample.sm_clock_mhz, Unavailable)
    assert sample.sm_clock_mhz.reason == Reason.GPU_LOST
    assert isinstance(sample.utilization_pct, Unavailable)
    assert sample.utilization_pct.reason == Reason.ERROR


def test_unreadable_value_is_an_error_value_not_a_crash() -> None:
    header = "timestamp, power.draw [W], clocks.sm [MHz]"
    sample = _one(f"{header}\n2024/10/25 11:21:22.123, 245 MHz, fast\n")
    assert isinstance(sample.power_w, Unavailable)
    assert sample.power_w.reason == Reason.ERROR
    assert "cannot read" in sample.power_w.detail
    assert isinstance(sample.sm_clock_mhz, Unavailable)


def test_columns_in_any_order() -> None:
    text = (
        "utilization.gpu [%], clocks.current.sm [MHz], index, power.draw [W], timestamp\n"
        "77 %, 1410 MHz, 3, 300.50 W, 2024/10/25 11:21:22.123\n"
    )
    log = parse_query_gpu_log(text)
    assert list(log.samples) == [3]
    sample = log.samples[3][0]
    assert (sample.utilization_pct, sample.sm_clock_mhz, sample.power_w) == (77, 1410, 300.5)


def test_only_timestamp_is_required() -> None:
    log = parse_query_gpu_log("timestamp\n2024/10/25 11:21:22.123\n2024/10/25 11:21:23.123\n")
    assert [s.t_s for s in log.samples[0]] == [0.0, 1.0]
    sample = log.samples[0][0]
    assert sample.power_w == NOT_MEASURED
    assert sample.temperature_gpu_c == NOT_MEASURED
    assert sample.temperature_memory_c == NOT_MEASURED
    assert sample.sm_clock_mhz == NOT_MEASURED
    assert sample.mem_clock_mhz == NOT_MEASURED
    assert sample.utilization_pct == NOT_MEASURED
    assert sample.clock_event_reasons == NOT_MEASURED


def test_gpu_key_from_index() -> None:
    text = (
        f"{_HEADER}\n"
        "2024/10/25 11:21:22.000, 1, 100 W, 1000 MHz, 10 %\n"
        "2024/10/25 11:21:22.000, 0, 200 W, 1000 MHz, 20 %\n"
        "2024/10/25 11:21:23.000, 1, 110 W, 1000 MHz, 11 %\n"
        "2024/10/25 11:21:23.000, 0, 210 W, 1000 MHz, 21 %\n"
    )
    log = parse_query_gpu_log(text)
    assert list(log.samples) == [0, 1]
    assert [s.power_w for s in log.samples[0]] == [200.0, 210.0]
    assert [s.power_w for s in log.samples[1]] == [100.0, 110.0]
    assert [s.t_s for s in log.samples[1]] == [0.0, 1.0]


def test_gpu_key_from_bus_id_order_and_normalised_bus_ids() -> None:
    text = (
        "timestamp, pci.bus_id, power.draw [W]\n"
        "2024/10/25 11:21:22.000, 0000:3b:00.0, 100 W\n"
        "2024/10/25 11:21:22.000, 00000000:18:00.0, 200 W\n"
        "2024/10/25 11:21:23.000, 0000:3B:00.0, 110 W\n"
        "2024/10/25 11:21:23.000, 00000000:18:00.0, 210 W\n"
    )
    log = parse_query_gpu_log(text)
    assert log.bus_ids == {0: "00000000:3B:00.0", 1: "00000000:18:00.0"}
    assert [s.power_w for s in log.samples[0]] == [100.0, 110.0]
    assert [s.power_w for s in log.samples[1]] == [200.0, 210.0]


def test_index_with_bus_id_records_bus_ids_by_index() -> None:
    text = (
        "timestamp, index, pci.bus_id, power.draw [W]\n"
        "2024/10/25 11:21:22.000, 7, 00000000:DB:00.0, 100 W\n"
        "2024/10/25 11:21:22.000, 2, 00000000:2A:00.0, 200 W\n"
    )
    assert parse_query_gpu_log(text).bus_ids == {2: "00000000:2A:00.0", 7: "00000000:DB:00.0"}


def test_gpu_key_from_position_within_a_shared_timestamp() -> None:
    text = (
        "timestamp, power.draw [W]\n"
        "2024/10/25 11:21:22.000, 100 W\n"
        "2024/10/25 11:21:22.000, 200 W\n"
        "2024/10/25 11:21:23.000, 110 W\n"
        "2024/10/25 11:21:23.000, 210 W\n"
    )
    log = parse_query_gpu_log(text)
    assert [s.power_w for s in log.samples[0]] == [100.0, 110.0]
    assert [s.power_w for s in log.samples[1]] == [200.0, 210.0]


def test_positions_that_do_not_line_up_are_refused() -> None:
    text = (
        "timestamp, power.draw [W]\n"
        "2024/10/25 11:21:22.000, 100 W\n"
        "2024/10/25 11:21:23.000, 110 W\n"
        "2024/10/25 11:21:23.000, 210 W\n"
    )
    with pytest.raises(ParseError, match=r"line 3: 2 rows share timestamp .* GPU position 1"):
        parse_query_gpu_log(text)


def test_timestamps_with_and_without_milliseconds() -> None:
    text = (
        "timestamp, index\n"
        "2024/10/25 11:21:22, 0\n2024/10/25 11:21:22.250, 0\n2024/10/25 11:21:24, 0\n"
    )
    assert [s.t_s for s in parse_query_gpu_log(text).samples[0]] == [0.0, 0.25, 2.0]


def test_t_s_crosses_midnight() -> None:
    text = "timestamp, index\n2024/12/31 23:59:59.500, 0\n2025/01/01 00:00:00.500, 0\n"
    assert [s.t_s for s in parse_query_gpu_log(text).samples[0]] == [0.0, 1.0]


@pytest.mark.parametrize(
    ("mask", "reasons"),
    [
        ("0x0000000000000000", ()),
        ("0x0000000000000001", ("gpu_idle",)),
        ("0x0000000000000004", ("sw_power_cap",)),
        ("0x0000000000000008", ("hw_slowdown",)),
        ("0x0000000000000048", ("hw_slowdown", "hw_thermal_slowdown")),
        ("0x0000000000000088", ("hw_slowdown", "hw_power_brake_slowdown")),
        ("0x0000000000000200", ("unknown_0x200",)),
    ],
)
def test_clock_event_mask(mask: str, reasons: tuple[str, ...]) -> None:
    text = f"timestamp, clocks_event_reasons.active\n2024/10/25 11:21:22.123, {mask}\n"
    assert _one(text).clock_event_reasons == reasons


def test_older_throttle_mask_name() -> None:
    text = (
        "timestamp, clocks_throttle_reasons.active\n2024/10/25 11:21:22.123, 0x0000000000000088\n"
    )
    assert _one(text).clock_event_reasons == ("hw_slowdown", "hw_power_brake_slowdown")


def test_unreadable_mask() -> None:
    text = "timestamp, clocks_event_reasons.active\n2024/10/25 11:21:22.123, [N/A]\n"
    assert _one(text).clock_event_reasons == NOT_MEASURED
    text = "timestamp, clocks_event_reasons.active\n2024/10/25 11:21:22.123, busy\n"
    reasons = _one(text).clock_event_reasons
    assert isinstance(reasons, Unavailable)
    assert reasons.reason == Reason.ERROR


def test_per_reason_columns_without_a_mask() -> None:
    text = (
        "timestamp, clocks_throttle_reasons.hw_slowdown, clocks_throttle_reasons.sw_power_cap, "
        "clocks_throttle_reasons.hw_power_brake_slowdown, clocks_throttle_reasons.gpu_idle, "
        "clocks_throttle_reasons.supported\n"
        "2024/10/25 11:21:22.123, Active, Not Active, Active, Not Active, 0x00000000000001FF\n"
        "2024/10/25 11:21:23.123, Not Active, Active, Not Active, Not Active, 0x00000000000001FF\n"
    )
    samples = parse_query_gpu_log(text).samples[0]
    assert samples[0].clock_event_reasons == ("hw_slowdown", "hw_power_brake_slowdown")
    assert samples[1].clock_event_reasons == ("sw_power_cap",)


def test_per_reason_columns_event_names_and_placeholders() -> None:
    header = (
        "timestamp, clocks_event_reasons.hw_thermal_slowdown, "
        "clocks_event_reasons.sw_thermal_slowdown, clocks_event_reasons.display_clock_setting"
    )
    rows = [
        "2024/10/25 11:21:22.000, [N/A], Active, Active",
        "2024/10/25 11:21:23.000, [N/A], [N/A], [N/A]",
    ]
    samples = parse_query_gpu_log("\n".join([header, *rows]) + "\n").samples[0]
    assert samples[0].clock_event_reasons == ("sw_thermal_slowdown", "display_clock_setting")
    assert samples[1].clock_event_reasons == NOT_MEASURED


def test_mask_wins_over_per_reason_columns_and_they_back_it_up() -> None:
    header = "timestamp, clocks_event_reasons.active, clocks_event_reasons.hw_slowdown"
    text = (
        f"{header}\n"
        "2024/10/25 11:21:22.000, 0x0000000000000004, Active\n"
        "2024/10/25 11:21:23.000, [N/A], Active\n"
    )
    samples = parse_query_gpu_log(text).samples[0]
    assert samples[0].clock_event_reasons == ("sw_power_cap",)
    assert samples[1].clock_event_reasons == ("hw_slowdown",)


def test_power_draw_preferred_then_instant_then_average() -> None:
    header = "timestamp, power.draw.average [W], power.draw.instant [W], power.draw [W]"
    text = (
        f"{header}\n"
        "2024/10/25 11:21:22.000, 300.00 W, 400.00 W, 350.00 W\n"
        "2024/10/25 11:21:23.000, 300.00 W, 400.00 W, [N/A]\n"
        "2024/10/25 11:21:24.000, 300.00 W, [N/A], [N/A]\n"
    )
    assert [s.power_w for s in parse_query_gpu_log(text).samples[0]] == [350.0, 400.0, 300.0]
    only_average = "timestamp, power.draw.average [W]\n2024/10/25 11:21:22.000, 123.40 W\n"
    assert _one(only_average).power_w == 123.4


def test_clock_column_aliases() -> None:
    text = (
        "timestamp, clocks.current.sm [MHz], clocks.current.memory [MHz], temperature.gpu, "
        "temperature.memory\n2024/10/25 11:21:22.123, 1755 MHz, 1593 MHz, 65, 71\n"
    )
    sample = _one(text)
    assert (sample.sm_clock_mhz, sample.mem_clock_mhz) == (1755, 1593)
    assert (sample.temperature_gpu_c, sample.temperature_memory_c) == (65.0, 71.0)


def test_prompt_and_blank_lines_before_the_header() -> None:
    text = (
        "\n"
        "$ nvidia-smi --query-gpu=timestamp,index,power.draw --format=csv -l 1\n"
        "\n"
        "timestamp, index, power.draw [W]\n"
        "2024/10/25 11:21:22.123, 0, 70.00 W\n"
    )
    log = parse_query_gpu_log(text)
    assert log.samples[0][0].power_w == 70.0


def test_prompt_line_naming_timestamp_among_its_fields_is_not_the_header() -> None:
    text = (
        "user@node:~$ nvidia-smi --query-gpu=index,timestamp,power.draw --format=csv -l 1\n"
        "index, timestamp, power.draw [W]\n"
        "0, 2024/10/25 11:21:22.123, 70.00 W\n"
    )
    log = parse_query_gpu_log(text)
    assert log.columns == ("index", "timestamp", "power.draw")
    assert log.samples[0][0].power_w == 70.0


def test_trailing_partial_row_is_dropped() -> None:
    text = (
        f"{_HEADER}\n"
        "2024/10/25 11:21:22.000, 0, 100 W, 1000 MHz, 10 %\n"
        "2024/10/25 11:21:23.000, 0, 101 W, 1000 MHz, 11 %\n"
        "2024/10/25 11:21:24.000, 0, 10"
    )
    assert [s.power_w for s in parse_query_gpu_log(text).samples[0]] == [100.0, 101.0]


def test_trailing_row_cut_inside_the_timestamp_is_dropped() -> None:
    text = "timestamp, index\n2024/10/25 11:21:22.000, 0\n2024/10/2"
    assert len(parse_query_gpu_log(text).samples[0]) == 1


def test_crlf_line_endings() -> None:
    text = f"{_HEADER}\r\n2024/10/25 11:21:22.123, 0, 245.33 W, 1980 MHz, 100 %\r\n"
    assert _one(text).utilization_pct == 100


def test_repeated_identical_header_is_skipped() -> None:
    text = (
        f"{_HEADER}\n"
        "2024/10/25 11:21:22.000, 0, 100 W, 1000 MHz, 10 %\n"
        f"{_HEADER}\n"
        "2024/10/25 11:30:00.000, 0, 101 W, 1000 MHz, 11 %\n"
    )
    assert [s.t_s for s in parse_query_gpu_log(text).samples[0]] == [0.0, 518.0]


def test_header_only_log_has_no_samples() -> None:
    log = parse_query_gpu_log(f"{_HEADER}\n")
    assert log.samples == {}
    assert log.bus_ids == {}
    assert log.columns[0] == "timestamp"


@pytest.mark.parametrize(
    ("row", "field", "detail"),
    [
        ("-3.00 W, 1000 MHz, 50, 50 %", "power_w", "implausible value '-3.00 W'"),
        ("3001.00 W, 1000 MHz, 50, 50 %", "power_w", "implausible value '3001.00 W'"),
        ("300 W, 5001 MHz, 50, 50 %", "sm_clock_mhz", "implausible value '5001 MHz'"),
        ("300 W, -1 MHz, 50, 50 %", "sm_clock_mhz", "implausible value '-1 MHz'"),
        ("300 W, 1000 MHz, 151, 50 %", "temperature_gpu_c", "implausible value '151'"),
        ("300 W, 1000 MHz, -41, 50 %", "temperature_gpu_c", "implausible value '-41'"),
        ("300 W, 1000 MHz, 50, 101 %", "utilization_pct", "implausible value '101 %'"),
        ("300 W, 1000 MHz, 50, -1 %", "utilization_pct", "implausible value '-1 %'"),
    ],
)
def test_implausible_values_are_errors(row: str, field: str, detail: str) -> None:
    header = "timestamp, power.draw [W], clocks.sm [MHz], temperature.gpu, utilization.gpu [%]"
    sample = _one(f"{header}\n2024/10/25 11:21:22.123, {row}\n")
    value = getattr(sample, field)
    assert isinstance(value, Unavailable)
    assert value.reason == Reason.ERROR
    assert value.detail.startswith(detail)


def test_plausibility_bounds_are_inclusive_and_gddr_memory_clocks_are_plausible() -> None:
    header = "timestamp, power.draw [W], clocks.sm [MHz], clocks.mem [MHz], utilization.gpu [%]"
    sample = _one(f"{header}\n2024/10/25 11:21:22.123, 0.00 W, 5000 MHz, 14001 MHz, 0 %\n")
    assert (sample.power_w, sample.sm_clock_mhz, sample.mem_clock_mhz) == (0.0, 5000, 14001)
    sample = _one(f"{header}\n2024/10/25 11:21:22.123, 3000 W, 0 MHz, 20001 MHz, 100 %\n")
    assert (sample.power_w, sample.sm_clock_mhz, sample.utilization_pct) == (3000.0, 0, 100)
    assert isinstance(sample.mem_clock_mhz, Unavailable)
    assert sample.mem_clock_mhz.detail.startswith("implausible value")


# --- inline ParseError cases ------------------------------------------------------------


def test_no_timestamp_column_is_refused() -> None:
    # The shape of a log taken without timestamp in its fields.
    text = "index, utilization.gpu [%], power.draw [W]\n0, 0 %, 75.10 W\n"
    with pytest.raises(ParseError, match=r"no header line with a 'timestamp' column"):
        parse_query_gpu_log(text)


def test_garbage_is_refused() -> None:
    with pytest.raises(ParseError, match="not an nvidia-smi --query-gpu CSV log"):
        parse_query_gpu_log("Hello, world\nthis is not a log\n")
    with pytest.raises(ParseError, match="no header"):
        parse_query_gpu_log("")


def test_wrong_cell_count_in_the_middle_is_refused() -> None:
    text = (
        f"{_HEADER}\n"
        "2024/10/25 11:21:22.000, 0, 100 W, 1000 MHz, 10 %\n"
        "2024/10/25 11:21:23.000, 0, 101 W, 10 %\n"
        "2024/10/25 11:21:24.000, 0, 102 W, 1000 MHz, 12 %\n"
    )
    with pytest.raises(ParseError, match=r"^line 3: 4 cells where the header has 5"):
        parse_query_gpu_log(text)


def test_timestamps_going_backwards_are_refused() -> None:
    text = (
        f"{_HEADER}\n"
        "2024/10/25 11:21:23.000, 0, 100 W, 1000 MHz, 10 %\n"
        "2024/10/25 11:21:22.000, 0, 101 W, 1000 MHz, 11 %\n"
    )
    with pytest.raises(ParseError, match=r"^line 3: timestamp .* earlier than GPU 0's .* line 2"):
        parse_query_gpu_log(text)


def test_unreadable_timestamp_in_the_middle_is_refused() -> None:
    text = (
        "timestamp, index\n2024/10/25 11:21:22.000, 0\nyesterday, 0\n2024/10/25 11:21:24.000, 0\n"
    )
    with pytest.raises(ParseError, match=r"^line 3: cannot read timestamp 'yesterday'"):
        parse_query_gpu_log(text)
    bad_date = "timestamp, index\n2024/13/25 11:21:22.000, 0\n2024/10/25 11:21:24.000, 0\n"
    with pytest.raises(ParseError, match=r"^line 2: cannot read timestamp"):
        parse_query_gpu_log(bad_date)


def test_unreadable_gpu_ids_are_refused() -> None:
    with pytest.raises(ParseError, match=r"^line 2: cannot read GPU index '\[N/A\]'"):
        parse_query_gpu_log("timestamp, index\n2024/10/25 11:21:22.000, [N/A]\n")
    with pytest.raises(ParseError, match=r"^line 2: cannot read pci.bus_id 'nowhere'"):
        parse_query_gpu_log("timestamp, pci.bus_id\n2024/10/25 11:21:22.000, nowhere\n")
    with pytest.raises(ParseError, match=r"^line 2: cannot read GPU uuid 'x'"):
        parse_query_gpu_log("timestamp, uuid\n2024/10/25 11:21:22.000, x\n")


def test_bus_id_changing_under_one_index_is_refused() -> None:
    text = (
        "timestamp, index, pci.bus_id\n"
        "2024/10/25 11:21:22.000, 0, 00000000:18:00.0\n"
        "2024/10/25 11:21:23.000, 0, 00000000:19:00.0\n"
    )
    with pytest.raises(ParseError, match=r"^line 3: GPU 0's pci.bus_id changed"):
        parse_query_gpu_log(text)


def test_second_header_with_other_columns_is_refused() -> None:
    text = (
        f"{_HEADER}\n"
        "2024/10/25 11:21:22.000, 0, 100 W, 1000 MHz, 10 %\n"
        "timestamp, power.draw [W]\n"
        "2024/10/25 11:30:00.000, 101 W\n"
    )
    with pytest.raises(ParseError, match=r"^line 3: a second header"):
        parse_query_gpu_log(text)
