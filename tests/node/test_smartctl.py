"""smartctl's NVMe health parser, held to real recorded outputs (tests/fixtures/smartctl)."""

from __future__ import annotations

from pathlib import Path

import pytest

from validator.node.parsers.base import ParseError
from validator.node.parsers.smartctl import SmartUnreadable, parse_smartctl

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "smartctl"


def read(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_a_healthy_drive_from_json() -> None:
    smart = parse_smartctl(read("scrutiny-smart-nvme-intel-pass.json"))
    assert smart.passed is True
    assert (smart.critical_warning, smart.media_errors, smart.percentage_used) == (0, 0, 0)
    assert (smart.available_spare, smart.available_spare_threshold) == (100, 10)
    assert smart.model == "INTEL SSDPEKNW010T8"
    assert smart.serial == "BTNH93710FS91P0B"
    assert smart.power_on_hours == 2401


def test_a_drive_with_media_errors_from_json() -> None:
    smart = parse_smartctl(read("scrutiny-smart-nvme-samsung-media-errors.json"))
    assert smart.passed is True  # the drive's own verdict passes: media errors are ours to fail
    assert smart.media_errors == 7
    assert smart.percentage_used == 3
    assert smart.device == "/dev/nvme0"


def test_a_device_smartctl_could_not_open_is_no_reading() -> None:
    with pytest.raises(SmartUnreadable, match="No such device"):
        parse_smartctl(read("local-debian-smartctl-no-device.json"))


def test_the_printed_health_section() -> None:
    smart = parse_smartctl(read("checkbox102-nvme-health-passed-EXCERPT.txt"))
    assert smart.passed is True
    assert (smart.critical_warning, smart.media_errors, smart.temperature_c) == (0, 0, 30)
    assert smart.power_on_hours == 6726  # "6,726"


def test_the_printed_critical_warning_is_hexadecimal() -> None:
    smart = parse_smartctl(read("smartmontools537-nvme-critical-warning-0x04-EXCERPT.txt"))
    assert smart.critical_warning == 4
    assert smart.percentage_used == 100
    assert smart.passed is None  # the excerpt holds no overall verdict


def test_the_printed_failed_verdict() -> None:
    smart = parse_smartctl(read("zbxsmartctl129-nvme-health-failed-EXCERPT.txt"))
    assert smart.passed is False


@pytest.mark.parametrize(
    "text", ["", "hello", "{}", '{"smartctl": 1}', "[1, 2]", "{not json", "x" * 5_000_000]
)
def test_nonsense_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_smartctl(text)
