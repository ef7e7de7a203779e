"""Version pins match at a boundary; nested or oversized node input is refused, never a crash."""

from __future__ import annotations

import pytest

from validator.judge.checks.host_health import _at_pin
from validator.node.burnin.worst_gpu import read_progress_line
from validator.node.parsers.base import ParseError
from validator.node.parsers.nvidia_ctk import parse_daemon_json
from validator.node.parsers.smartctl import parse_smartctl_json


@pytest.mark.parametrize(
    ("pin", "version", "at"),
    [
        ("2.21.5", "2.21.5-1+cuda12.4", True),
        ("2.21.5", "1:2.21.5-1", True),
        ("2.21.5", "2.21.50-1+cuda12.4", False),  # another release, not the pin
        ("3.3", "3.35.1-1", False),
        ("MLNX_OFED_LINUX-24.10", "MLNX_OFED_LINUX-24.10-1.1.4.0", True),
        ("MLNX_OFED_LINUX-24.10", "MLNX_OFED_LINUX-24.101-1.1.4.0", False),
    ],
)
def test_a_version_pin_matches_at_a_boundary_only(pin: str, version: str, at: bool) -> None:
    assert _at_pin(pin, version) is at


@pytest.mark.parametrize("parse", [parse_daemon_json, parse_smartctl_json])
def test_json_nested_past_the_stack_is_a_parse_error_not_a_crash(parse: object) -> None:
    with pytest.raises(ParseError):
        parse("[" * 200_000)  # type: ignore[operator]


def test_a_progress_line_with_a_number_past_a_float_is_dropped() -> None:
    line = 'gpuready-progress {"gpu": 1, "tflops": ' + "9" * 400 + "}"
    assert len(line) < 512
    assert read_progress_line(line) is None


def test_a_held_package_is_installed() -> None:
    """gpuready holds what it pins: dpkg's status "hi" (hold, installed) is installed.

    The status is dpkg's ${db:Status-Abbrev}: the wanted action, then the state.
    """
    from validator.node.parsers.host_proc import parse_package_versions

    listing = (
        "datacenter-gpu-manager-4-core 1:4.4.1-1 hi \n"
        "libnccl2 2.23.4-1+cuda12.4 ii \n"
        "nvidia-container-toolkit 1.17.8-1 rc \n"  # removed, its configuration left
        "rdma-core  un \n"  # known, never installed
    )
    assert parse_package_versions(listing) == {
        "datacenter-gpu-manager-4-core": "1:4.4.1-1",
        "libnccl2": "2.23.4-1+cuda12.4",
    }
