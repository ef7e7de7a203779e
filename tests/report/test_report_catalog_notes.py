"""A verdict resting on an unconfirmed catalog figure says so, in the terminal and the JSON.

The H100 NVL's tensor peaks are recalled from NVIDIA's datasheet, which was not retrieved
(skus.yaml marks them ``unconfirmed``); the H100 SXM's are confirmed. The same slow GPU
is judged against each: only the first finding carries the note.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tests.judge.test_catalog_sources import CATALOG, NVL_BANDWIDTH, NVL_DOUBTED
from tests.judge.test_judge_healthy import healthy_node, judge, with_gpu_burn
from validator.cli.main import main
from validator.judge import Policy, Thresholds, load_catalog
from validator.judge.catalog_notes import note_unconfirmed
from validator.model import Finding, Report, Severity
from validator.report.json_report import render_json
from validator.report.terminal import render_text

NOTE = "judged against an unconfirmed catalog figure"
SLOW = with_gpu_burn(healthy_node(), 0, tflops=300.0)


def _speed(result: object, gpu: int = 0) -> Finding:
    return next(
        f
        for f in result.findings  # type: ignore[attr-defined]
        if f.check == "burn.speed" and f.gpu_index == gpu
    )


def _both_outputs(policy: Policy) -> tuple[str, str]:
    report = Report(
        generated_at="2026-01-01T00:00:00Z", tool_version="0", nodes=(judge(SLOW, policy),)
    )
    return render_text(report), render_json(report)


def _json_speed_message(document: str) -> str:
    node = json.loads(document)["nodes"][0]
    return next(
        f["message"] for f in node["findings"] if f["check"] == "burn.speed" and f["gpu_index"] == 0
    )


def test_a_speed_judged_against_an_unconfirmed_peak_says_so() -> None:
    nvl = Policy(expected_model="h100-nvl")
    finding = _speed(judge(SLOW, nvl))
    assert finding.severity is Severity.FAIL
    assert (
        "(judged against an unconfirmed catalog figure: the H100 NVL's dense BF16 peak, 835 "
        in finding.message
    )
    text, document = _both_outputs(nvl)
    speed_lines = [line for line in text.splitlines() if "burn.speed " in line and " gpu0 " in line]
    assert speed_lines, text
    assert all(NOTE in line for line in speed_lines), speed_lines
    assert NOTE in _json_speed_message(document)
    # The GPUs that passed were judged against the same figure: their findings say it too.
    assert NOTE in _speed(judge(SLOW, nvl), gpu=1).message


def test_a_speed_judged_against_a_confirmed_peak_has_no_note() -> None:
    finding = _speed(judge(SLOW, Policy()))
    assert finding.severity is Severity.FAIL
    text, document = _both_outputs(Policy())
    assert "burn.speed" in text
    assert NOTE not in text
    assert NOTE not in _json_speed_message(document)


def _hbm(severity: Severity) -> Finding:
    return Finding(
        check="interconnect.hbm", severity=severity, message="GPU 2 copied slowly", gpu_index=2
    )


def test_a_floor_the_policy_sets_or_a_check_that_judged_nothing_has_no_note(
    tmp_path: Path,
) -> None:
    # No shipped row's HBM floor rests on an unconfirmed bandwidth any more (NVIDIA's Blackwell
    # datasheet settled the B200's), so mark the H100 NVL's third-party bandwidth unconfirmed.
    text = CATALOG.read_text()
    assert text.count(NVL_BANDWIDTH) == 1
    path = tmp_path / "skus.yaml"
    path.write_text(text.replace(NVL_BANDWIDTH, NVL_DOUBTED))
    nvl = load_catalog(str(path)).get("h100-nvl")
    facts = healthy_node()
    noted = note_unconfirmed([_hbm(Severity.FAIL)], facts, Policy(), nvl)
    assert noted[0].message.endswith("the H100 NVL's HBM copy floor, 2218)")
    own_floor = Policy(thresholds=dataclasses.replace(Thresholds(), hbm_min_gbs=4000.0))
    assert note_unconfirmed([_hbm(Severity.FAIL)], facts, own_floor, nvl)[0].message == (
        "GPU 2 copied slowly"
    )
    assert note_unconfirmed([_hbm(Severity.UNKNOWN)], facts, Policy(), nvl)[0].message == (
        "GPU 2 copied slowly"
    )


# ------------------------------------------------------------ as the operator runs it


def _scenario(tmp_path: Path) -> Path:
    scenario = tmp_path / "slow-gpu0.json"
    scenario.write_text(
        json.dumps(
            {
                "name": "slow-gpu0",
                "extends": "healthy-8x-h100-sxm",
                "description": "GPU 0 burns at 300 TFLOPS",
                "burn": {"gpu_overrides": {"0": {"tflops": 300.0}}},
            }
        )
    )
    return scenario


def _certify(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    main(["certify", "--burn", "1s", "--no-color", *args])
    return capsys.readouterr().out


@pytest.mark.parametrize(("model", "noted"), [("h100-nvl", True), (None, False)])
def test_certify_says_which_verdicts_rest_on_unconfirmed_figures(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, model: str | None, noted: bool
) -> None:
    args = ["--simulate", str(_scenario(tmp_path))]
    if model is not None:
        policy = tmp_path / "policy.yaml"
        policy.write_text(f"expected_model: {model}\n")
        args += ["--policy", str(policy)]
    text = _certify(capsys, *args)
    speed = [line for line in text.splitlines() if "burn.speed " in line and " gpu0 " in line]
    assert speed, text
    assert all((NOTE in line) is noted for line in speed), speed
    document = _certify(capsys, "--json", *args)
    assert (NOTE in _json_speed_message(document)) is noted


def test_a_reading_over_a_ceiling_made_of_an_unconfirmed_figure_says_so() -> None:
    """inventory.figures_plausible's UNKNOWN blocks the certificate on the ceiling's word."""
    fast = with_gpu_burn(healthy_node(), 0, tflops=1500.0)  # above both models' 1.05 x peak
    for policy, noted in ((Policy(expected_model="h100-nvl"), True), (Policy(), False)):
        plausible = [
            f
            for f in judge(fast, policy).findings
            if f.check == "inventory.figures_plausible" and f.gpu_index == 0
        ]
        assert len(plausible) == 1
        assert plausible[0].severity is Severity.UNKNOWN
        assert (NOTE in plausible[0].message) is noted, plausible[0].message
