"""nvidia-smi parsers (banner, -q text, -q -x XML, error texts) against the real corpus."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from validator.model import NOT_MEASURED, NOT_SUPPORTED, NvmlStatus, Reason, Unavailable, to_dict
from validator.node.parsers.base import ParseError
from validator.node.parsers.smi_banner import parse_banner
from validator.node.parsers.smi_common import (
    clock_event_name,
    normalize_bus_id,
    read_bool,
    read_compute_mode,
    read_float,
    read_int,
    read_state_word,
    sum_counts,
)
from validator.node.parsers.smi_errors import classify_smi_error, library_version, lost_gpu_bus_ids
from validator.node.parsers.smi_query import parse_smi_query
from validator.node.parsers.smi_xml import parse_smi_xml

FIXTURES = Path(__file__).parent.parent / "fixtures" / "parsers"


def _cases(prefix: str) -> list[Path]:
    found = sorted(FIXTURES.glob(f"{prefix}-*.json"))
    assert found, f"no {prefix} fixtures"
    return found


def _load(fixture: Path, captures_dir: Path) -> tuple[dict[str, Any], str]:
    case = json.loads(fixture.read_text())
    assert case["source"], "every fixture names where its capture comes from"
    return case, (captures_dir / case["capture"]).read_text(encoding="utf-8")


def _check_gpus(gpus: Any, expected: dict[str, Any]) -> None:
    assert len(gpus) == expected["gpu_count"]
    for index, fields in expected["gpus"].items():
        actual = to_dict(gpus[int(index)])
        for name, value in fields.items():
            assert actual[name] == value, f"gpu {index} {name}: {actual[name]!r} != {value!r}"


@pytest.mark.parametrize("fixture", _cases("q"), ids=lambda p: p.stem)
def test_smi_query_fixture(fixture: Path, captures_dir: Path) -> None:
    case, text = _load(fixture, captures_dir)
    expected = case["expected"]
    result = parse_smi_query(text)
    assert result.status == NvmlStatus.OK
    assert to_dict(result.driver_version) == expected["driver_version"]
    assert to_dict(result.cuda_version) == expected["cuda_version"]
    assert to_dict(result.attached_gpus) == expected["attached_gpus"]
    _check_gpus(result.gpus, expected)


@pytest.mark.parametrize("fixture", _cases("xml"), ids=lambda p: p.stem)
def test_smi_xml_fixture(fixture: Path, captures_dir: Path) -> None:
    case, text = _load(fixture, captures_dir)
    expected = case["expected"]
    result = parse_smi_xml(text)
    assert result.status == NvmlStatus.OK
    assert to_dict(result.driver_version) == expected["driver_version"]
    assert to_dict(result.cuda_version) == expected["cuda_version"]
    assert to_dict(result.attached_gpus) == expected["attached_gpus"]
    _check_gpus(result.gpus, expected)


@pytest.mark.parametrize("fixture", _cases("banner"), ids=lambda p: p.stem)
def test_banner_fixture(fixture: Path, captures_dir: Path) -> None:
    case, text = _load(fixture, captures_dir)
    expected = case["expected"]
    result = parse_banner(text)
    assert result.status == NvmlStatus.OK
    assert result.driver_version == expected["driver_version"]
    assert result.cuda_version == expected["cuda_version"]
    _check_gpus(result.gpus, expected)


# ---------------------------------------------------------------- broken input


def test_xml_cut_in_half_names_the_line(captures_dir: Path) -> None:
    text = (captures_dir / "nvidia-smi-xml/telegraf-tesla-t4.xml").read_text()
    half = text[: len(text) // 2]
    with pytest.raises(ParseError, match=r"line \d+") as info:
        parse_smi_xml(half)
    assert "\n" not in str(info.value)


def test_query_cut_in_half_keeps_the_gpus_it_has(captures_dir: Path) -> None:
    text = (captures_dir / "nvidia-smi-q/gls-H100SXMx8-565.57.01.txt").read_text()
    # Cut mid-way through the second GPU, just after its "Temperature" header.
    second = text.index("GPU 00000000:2A:00.0")
    cut = text.index("    Temperature\n", second) + len("    Temperature\n")
    result = parse_smi_query(text[:cut])
    # Decision: the GPUs before the cut are parsed, the shortfall stays visible.
    assert result.attached_gpus == 8
    assert len(result.gpus) == 2
    assert result.gpus[0].fabric_status == "success"
    last = result.gpus[1]
    assert last.name == "NVIDIA H100 80GB HBM3"
    assert last.memory_total_mib == 81559
    for missing in (last.temperature_gpu_c, last.power_draw_w, last.fabric_status):
        assert isinstance(missing, Unavailable)
        assert missing.reason == Reason.NOT_MEASURED


def test_query_cut_says_which_gpu_section_it_ends_in(captures_dir: Path) -> None:
    text = (captures_dir / "nvidia-smi-q/gls-H100SXMx8-565.57.01.txt").read_text()
    assert parse_smi_query(text).cut == ""
    second = text.index("GPU 00000000:2A:00.0")
    cut = text.index("    Temperature\n", second)
    assert parse_smi_query(text[:cut]).cut == (
        "GPU 00000000:2A:00.0 ends before its Processes section"
    )
    # Cut right after the last "Capabilities" header (R555+ ends each GPU with it).
    header = text.rindex("    Capabilities\n") + len("    Capabilities\n")
    assert parse_smi_query(text[:header]).cut == (
        "GPU 00000000:DB:00.0 ends on the bare section header 'Capabilities'"
    )


def test_xml_closed_again_without_processes_is_cut(captures_dir: Path) -> None:
    # Trimmed by the fixture's author (SOURCES.md): well-formed, but not a whole <gpu>.
    trimmed = (captures_dir / "nvidia-smi-xml/telegraf-gtx-1070-ti.xml").read_text()
    assert parse_smi_xml(trimmed).cut == '<gpu id="00000000:01:00.0"> has no <processes> element'
    whole = (captures_dir / "nvidia-smi-xml/telegraf-tesla-t4.xml").read_text()
    assert parse_smi_xml(whole).cut == ""


def test_query_cut_before_first_gpu_is_an_error(captures_dir: Path) -> None:
    text = (captures_dir / "nvidia-smi-q/gls-H100SXMx8-565.57.01.txt").read_text()
    head = text[: text.index("GPU 00000000:18:00.0")]
    with pytest.raises(ParseError, match="no GPU section"):
        parse_smi_query(head)


def test_banner_cut_inside_the_gpu_row_is_an_error(captures_dir: Path) -> None:
    text = (captures_dir / "nvidia-smi-banner/gls-A10-550.90.12.txt").read_text()
    cut = text[: text.index("NVIDIA A10 ") + 40]
    with pytest.raises(ParseError):
        parse_banner(cut)


@pytest.mark.parametrize("parse", [parse_banner, parse_smi_query, parse_smi_xml])
@pytest.mark.parametrize("text", ["", "   \n", "hello world\nthis is not nvidia-smi\n"])
def test_empty_and_random_text_raise(parse: Any, text: str) -> None:
    with pytest.raises(ParseError):
        parse(text)


def test_xml_with_other_root_is_rejected() -> None:
    with pytest.raises(ParseError, match="nvidia_smi_log"):
        parse_smi_xml("<html><body/></html>")


def test_xml_with_entities_is_refused() -> None:
    doc = '<!DOCTYPE x [<!ENTITY a "aaaa">]><nvidia_smi_log><gpu id="0:1:0.0"/></nvidia_smi_log>'
    with pytest.raises(ParseError, match="entities"):
        parse_smi_xml(doc)


# ---------------------------------------------------------------- error texts

_DRIVER_DOWN = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)


@pytest.mark.parametrize(
    ("text", "status"),
    [
        (_DRIVER_DOWN, NvmlStatus.DRIVER_NOT_LOADED),
        (
            "Failed to initialize NVML: Driver/library version mismatch\n"
            "NVML library version: 550.127\n",
            NvmlStatus.DRIVER_MISMATCH,
        ),
        ("No devices were found\n", NvmlStatus.NO_DEVICES),
        ("bash: nvidia-smi: command not found\n", NvmlStatus.LIBRARY_NOT_FOUND),
        (
            "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system.",
            NvmlStatus.LIBRARY_NOT_FOUND,
        ),
        ("NVML library not found", NvmlStatus.LIBRARY_NOT_FOUND),
        ("Failed to initialize NVML: Insufficient Permissions\n", NvmlStatus.NO_PERMISSION),
        (
            "Unable to determine the device handle for GPU0000:91:00.0: Unknown Error\n",
            NvmlStatus.ERROR,
        ),
        (
            "Unable to determine the device handle for gpu 0000:3B:00.0: GPU is lost.  "
            "Reboot the system to recover this GPU\n",
            NvmlStatus.ERROR,
        ),
    ],
)
def test_error_texts_become_status(text: str, status: NvmlStatus) -> None:
    found = classify_smi_error(text)
    assert found is not None
    assert found[0] == status
    assert "\n" not in found[1]
    assert found[1] == text.strip().splitlines()[0].strip()
    for parse in (parse_banner, parse_smi_query, parse_smi_xml):
        result = parse(text)
        assert result.status == status
        assert result.gpus == ()
        assert result.detail == found[1]
        # Only the mismatch text names a user-space version; without one it stays unknown.
        if "NVML library version" in text:
            assert result.driver_version == "550.127"
        else:
            assert result.driver_version == NOT_MEASURED
        assert result.cuda_version == NOT_MEASURED


def test_normal_output_is_not_an_error(captures_dir: Path) -> None:
    # V100 -q carries "Host Max : Unknown Error" cells: values, not an nvidia-smi failure.
    text = (captures_dir / "nvidia-smi-q/gls-V100_x8-550.127.05.txt").read_text()
    assert parse_smi_query(text).status == NvmlStatus.OK
    assert classify_smi_error("Tue Jul 14 09:00:43 2026\n| NVIDIA-SMI 590.48.01 |") is None


def test_lost_gpu_bus_ids() -> None:
    text = (
        "Unable to determine the device handle for GPU0000:91:00.0: Unknown Error\n"
        "Unable to determine the device handle for gpu 0000:3b:00.0: GPU is lost.\n"
        "NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.\n"
        "No devices were found\n"
    )
    assert lost_gpu_bus_ids(text) == ("0000:91:00.0", "0000:3B:00.0")
    assert lost_gpu_bus_ids("No devices were found\n") == ()


# ---------------------------------------------------------------- value readers


def test_value_readers() -> None:
    assert read_int("81559 MiB", "MiB") == 81559
    assert read_int("16x", "x") == 16
    assert read_float("700.00 W", "W") == 700.0
    assert read_float("-8 C", "C") == -8.0
    for placeholder in ("N/A", "[N/A]", "[Not Supported]", "Not Supported"):
        assert read_int(placeholder, "MiB") == NOT_SUPPORTED
    error = read_float("[Unknown Error]", "W")
    assert isinstance(error, Unavailable)
    assert error.reason == Reason.ERROR
    assert read_float("Unknown Error", "W") == Unavailable(Reason.ERROR, "Unknown Error")
    garbage = read_int("lots MiB", "MiB")
    assert isinstance(garbage, Unavailable)
    assert garbage.reason == Reason.ERROR
    assert read_bool("Enabled") is True
    assert read_bool("Disabled") is False
    assert read_bool("Active") is True
    assert read_bool("Not Active") is False
    assert read_compute_mode("E. Process") == "exclusive_process"
    assert read_compute_mode("Exclusive_Process") == "exclusive_process"
    assert read_compute_mode("Prohibited") == "prohibited"
    assert read_state_word("In Progress") == "in_progress"
    assert read_state_word("Not Started") == "not_started"


def test_bus_id_normalisation() -> None:
    assert normalize_bus_id("0000:3b:00.0") == "00000000:3B:00.0"
    assert normalize_bus_id("00000000:18:00.0") == "00000000:18:00.0"
    assert normalize_bus_id("not a bus") is None


def test_sum_counts_fails_closed() -> None:
    assert sum_counts([1, NOT_SUPPORTED, 2]) == 3
    assert sum_counts([NOT_SUPPORTED, NOT_SUPPORTED]) == NOT_SUPPORTED
    error = Unavailable(Reason.ERROR, "Unknown Error")
    assert sum_counts([5, error]) == error


def test_clock_event_labels() -> None:
    assert clock_event_name("Invalid HW Thermal Slowdown") == "hw_thermal_slowdown"
    assert clock_event_name("Idle") == "gpu_idle"
    assert clock_event_name("display_clocks_setting") == "display_clock_setting"
    assert clock_event_name("Something New") == "unknown_something_new"


def test_never_stores_tlimit_offset_as_absolute(captures_dir: Path) -> None:
    for name in ("gls-H100SXMx8-565.57.01.txt", "gls-L40S-550.127.05.txt"):
        gpu = parse_smi_query((captures_dir / "nvidia-smi-q" / name).read_text()).gpus[0]
        assert isinstance(gpu.temp_shutdown_c, Unavailable)
        assert isinstance(gpu.temp_slowdown_c, Unavailable)
        assert isinstance(gpu.tlimit_shutdown_c, float)
        assert gpu.tlimit_shutdown_c < 0


def test_active_throttle_reasons_are_collected() -> None:
    text = """
==============NVSMI LOG==============

Driver Version                            : 550.54.14
CUDA Version                              : 12.4

Attached GPUs                             : 1
GPU 00000000:01:00.0
    Product Name                          : NVIDIA A10
    Clocks Event Reasons
        Idle                              : Not Active
        Applications Clocks Setting       : Not Active
        SW Power Cap                      : Active
        HW Slowdown                       : Active
            HW Thermal Slowdown           : Active
            HW Power Brake Slowdown       : Not Active
        Sync Boost                        : Not Active
        SW Thermal Slowdown               : Not Active
        Display Clock Setting             : Not Active
    Remapped Rows                         : N/A
"""
    gpu = parse_smi_query(text).gpus[0]
    assert gpu.clock_event_reasons == ("sw_power_cap", "hw_slowdown", "hw_thermal_slowdown")
    assert gpu.remap_pending == NOT_SUPPORTED
    assert gpu.pci_bus_id == "00000000:01:00.0"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Failed to initialize NVML: Driver/library version mismatch\n"
            "NVML library version: 550.54\n",
            "550.54",
        ),
        ("NVML library version: 535.183.01", "535.183.01"),
        ("Failed to initialize NVML: Driver/library version mismatch\n", NOT_MEASURED),
        ("NVML library version: unknown\n", NOT_MEASURED),
    ],
)
def test_library_version_from_error_text(text: str, expected: object) -> None:
    assert library_version(text) == expected
