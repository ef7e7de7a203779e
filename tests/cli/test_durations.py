"""Durations as an operator writes them (1h30m, 2m30s, 1.5h), everywhere a duration is taken."""

from __future__ import annotations

import json
import time

import pytest

from validator.cli.main import cli, main
from validator.error_tree import BadInputError, ExitCode
from validator.node.burnin.burn_config import (
    WEEK_S,
    parse_burn_duration,
    parse_deadline,
    parse_duration,
)

HEALTHY = "healthy-8x-h100-sxm"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90.0),
        ("90s", 90.0),
        ("5m", 300.0),
        ("1.5h", 5400.0),
        ("1h30m", 5400.0),
        ("2m30s", 150.0),
        ("1h30m15s", 5415.0),
        ("1m250ms", 60.25),
        ("1h 30m", 5400.0),  # a space between the parts, as people type it
        ("  5m\t", 300.0),  # surrounding white space
        ("0", 0.0),
        ("0h0m", 0.0),
        ("168h", WEEK_S),
    ],
)
def test_compound_durations_are_read(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    [
        "1h-5m",  # a minus inside
        "-5m",
        "30m1h",  # smallest first
        "5m5m",  # a unit twice
        "1h30",  # a bare number after a unit
        "1ms1s",
        "\u0663m",  # ARABIC-INDIC DIGIT THREE: a digit to Python, not to the operator
        "\uff15m",  # FULLWIDTH DIGIT FIVE
        "1e3",
        "inf",
        "nan",
        "h",
        "",
        "   ",
        "1.h",
        "5 x",
        "1h\x00",
    ],
)
def test_nonsense_is_refused_naming_the_flag_and_the_forms(text: str) -> None:
    with pytest.raises(BadInputError) as caught:
        parse_duration(text, "--deadline")
    message = str(caught.value)
    assert message.startswith("--deadline ")
    assert "1h30m" in message
    assert "2m30s" in message
    assert "\n" not in message


def test_overflow_is_refused_by_the_bound_not_read_as_a_number() -> None:
    with pytest.raises(BadInputError, match="longer than a week: give at most 168h"):
        parse_burn_duration("168h1s")
    with pytest.raises(BadInputError, match="longer than a week"):
        parse_deadline("9" * 400 + "h")  # past a float: infinity, then the week refuses it
    with pytest.raises(BadInputError, match="must be longer than 0s"):
        parse_deadline("0h0m0s")


def test_a_long_text_is_refused_at_once() -> None:
    for text in (" " * 1000 + "x", "1 " * 500 + "x", "1h" * 500, "9" * 5000):
        started = time.monotonic()
        with pytest.raises(BadInputError):
            parse_duration(text)
        assert time.monotonic() - started < 0.5


def test_certify_burns_for_a_compound_duration(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["certify", "--simulate", HEALTHY, "--burn", "0m1s500ms", "--json"])
    out, _ = capsys.readouterr()
    node = json.loads(out)["nodes"][0]
    assert code == ExitCode.OK
    assert node["facts"]["burn"]["duration_s"] == pytest.approx(1.5)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["certify", "--simulate", HEALTHY, "--burn", "1h-5m"], "--burn"),
        (["drift", "--simulate", HEALTHY, "--burn", "\u0665m"], "--burn"),
        (["certify", "--simulate", HEALTHY, "--burn", "0", "--deadline", "1h-5m"], "--deadline"),
    ],
)
def test_a_bad_duration_on_the_command_line_is_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], flag: str
) -> None:
    code = main(args)
    out, err = capsys.readouterr()
    assert code == ExitCode.BAD_INPUT
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"gpuready: error: {flag} ")
    assert "1h30m" in err


@pytest.mark.parametrize(
    ("flag", "text", "seconds"),
    [("--connect-timeout", "2m", 120.0), ("--connect-timeout", "1m30s", 90.0),
     ("--poll", "250ms", 0.25), ("--inventory-timeout", "1h", 3600.0)],
)  # fmt: skip
def test_seconds_options_take_durations(flag: str, text: str, seconds: float) -> None:
    """An option in seconds reads a duration as well as a number."""
    command = cli.commands["certify"]
    with command.make_context("certify", [flag, text], resilient_parsing=False) as ctx:
        name = {"--poll": "slurm_poll"}.get(flag, flag[2:].replace("-", "_"))
        if flag == "--inventory-timeout":
            from validator import ansible_inventory

            assert ansible_inventory.set_script_timeout(60.0) == seconds
            return
        assert ctx.params[name] == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["1h-5m", "\u0662s", "nan", "inf", "2 minutes", "3601s"])
def test_seconds_options_refuse_what_is_no_duration(
    capsys: pytest.CaptureFixture[str], text: str
) -> None:
    code = main(["certify", "--simulate", HEALTHY, "--connect-timeout", text])
    _, err = capsys.readouterr()
    assert code == ExitCode.BAD_INPUT
    assert err.startswith("gpuready: error: --connect-timeout must be a finite number from 0.1")
    assert "(or a duration: 30s, 2m, 1h30m)" in err
