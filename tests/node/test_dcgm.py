"""DCGM diagnostics end to end: the parsers on real outputs, the runner, the plumbing, the check.

Real outputs are read in place: ``../shared/captures/dcgmi/`` (each with the findings
its SOURCES row names) and ``tests/fixtures/dcgmi/`` (found in public sources; see its
SOURCES.md).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from tests.collecting import collect_capture, collect_simulated
from validator.error_tree import CaptureError
from validator.judge.checks import dcgm as dcgm_check
from validator.judge.policy import Policy
from validator.model import (
    Action,
    DcgmDiag,
    DcgmOutcome,
    DcgmTestResult,
    Finding,
    GpuFacts,
    HostSpec,
    NodeFacts,
    Reason,
    Severity,
    Unavailable,
    from_dict,
    to_dict,
)
from validator.node import agent
from validator.node import collect as collector
from validator.node.burnin.burn_config import BurnConfig
from validator.node.collect import CollectRequest
from validator.node.dcgm_run import DEFAULT_TIMEOUT_S, NOT_FOUND, run_dcgm, run_dcgmi
from validator.node.parsers.base import ParseError
from validator.node.parsers.dcgm_diag import (
    DcgmParsed,
    dcgm_test_name,
    parse_dcgm_json,
    parse_dcgm_text,
)
from validator.node.sim.simulated_source import SimulatedSource
from validator.node.system import CommandResult
from validator.remote.transport import AgentRequest
from validator.service.collect_and_judge import Reach

FIXTURES = Path(__file__).parent.parent / "fixtures" / "dcgmi"
DCGM4_JSON = (
    "repo-NVIDIA-DCGM-teststrings-4xgpu-dcgm4-diag-json-mixed-pass-skip-fail-sm_stress.json"
)
GODCGM_TEXT = "issue-godcgm52-2gpu-diag-fragment-fail-gpu-memory-cuda-busy-pcie-bw-info.txt"
XID64_TEXT = "repo-mlengineering-diag-fragment-xid64-row-remap.txt"
THERMAL_TEXT = "repo-mlengineering-diag-r2-fragment-thermal-fail.txt"
DCGM31_JSON = "repo-NVIDIA-DCGM-JsonResultTests-8xgpu-dcgm3.1.0-json-real-output.json"
DCGM423_TEXT = (
    "issue-DCGM253-4xgpu-26b9-dcgm4.2.3-diag-text-metadata-software-per-gpu-TRUNCATED.txt"
)
# What dcgmi prints on stdout when nv-hostengine does not answer (dcgmi/Command.cpp,
# NVIDIA/DCGM @72fa3feaa67d716a75323a8f47c34ff3ee73f824), exiting DCGM_ST_CONNECTION_NOT_VALID.
HOST_ENGINE_DOWN = (
    "Error: unable to establish a connection to the specified host: localhost\n"
    "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"
)
LEVEL3 = dataclasses.replace(Policy(), dcgm_level=3)


def _read(directory: Path, name: str) -> str:
    return (directory / name).read_text(encoding="utf-8")


def _by(parsed: DcgmParsed, test: str) -> dict[int | None, DcgmTestResult]:
    return {r.gpu_index: r for r in parsed.results if r.test == test}


def _diag(parsed: DcgmParsed, level: int | None = 3, source: str = "test") -> DcgmDiag:
    return DcgmDiag(level=level, source=source, results=parsed.results)


def _facts(diag: DcgmDiag | None) -> NodeFacts:
    return NodeFacts(hostname="node", source="capture", dcgm=diag)


def _findings(findings: Sequence[Finding], check: str) -> dict[int | None, Finding]:
    return {f.gpu_index: f for f in findings if f.check == check}


# ---------------------------------------------------------------- the shared captures


def test_dcgm4_json_capture_reads_as_its_sources_row_says(captures_dir: Path) -> None:
    parsed = parse_dcgm_json(_read(captures_dir / "dcgmi", DCGM4_JSON))
    deployment = [r for r in parsed.results if r.category == "deployment"]
    assert len(deployment) == 10 * 4
    assert {r.gpu_index for r in deployment} == {0, 1, 2, 3}
    assert all(r.outcome is DcgmOutcome.PASS for r in deployment)
    assert {r.test for r in deployment} >= {"software.denylist", "software.fabric_manager"}
    memory = _by(parsed, "memory")
    assert memory[0].outcome is DcgmOutcome.SKIP
    assert "ECC memory on GPU 0 is not currently active" in memory[0].message
    assert memory[0].error_id == 55
    assert [memory[gpu].outcome for gpu in (1, 2, 3)] == [DcgmOutcome.PASS] * 3
    assert {r.outcome for r in _by(parsed, "diagnostic").values()} == {DcgmOutcome.SKIP}
    assert "Unable to find hardware diagnostic" in _by(parsed, "diagnostic")[2].message
    pcie = _by(parsed, "pcie")
    assert {r.outcome for r in pcie.values()} == {DcgmOutcome.PASS}
    assert "GPU to Host bandwidth: 13.08 GB/s" in pcie[0].message
    assert "Host to GPU bandwidth: 12.13 GB/s" in pcie[3].message
    assert "bidirectional bandwidth: 22.41 GB/s" in pcie[1].message
    assert {r.outcome for r in _by(parsed, "memory_bandwidth").values()} == {DcgmOutcome.SKIP}
    stress = _by(parsed, "sm_stress")
    assert stress[0].outcome is DcgmOutcome.FAIL
    assert stress[0].message.startswith(
        "Max stress level of 2128.7 did not exceed desired stress level of 3000.0 for GPU 0"
    )
    assert stress[1].outcome is DcgmOutcome.PASS
    assert parsed.version == "1.7"


def test_dcgm4_json_capture_judged_skip_is_never_a_pass(captures_dir: Path) -> None:
    parsed = parse_dcgm_json(_read(captures_dir / "dcgmi", DCGM4_JSON))
    findings = dcgm_check.check(_facts(_diag(parsed)), LEVEL3, None)
    stress = _findings(findings, "dcgm.sm_stress")
    assert stress[0].severity is Severity.FAIL
    assert "Max stress level of 2128.7 did not exceed desired stress level of 3000.0" in (
        stress[0].message
    )
    assert stress[0].action is Action.CHECK_COOLING_POWER
    assert stress[1].severity is Severity.PASS
    assert stress[1].action is Action.NONE
    memory = _findings(findings, "dcgm.memory")
    assert memory[0].severity is Severity.UNKNOWN
    assert memory[0].required
    assert memory[0].action is Action.RERUN
    assert memory[1].severity is Severity.PASS
    skipped = _findings(findings, "dcgm.targeted_power")
    assert {f.severity for f in skipped.values()} == {Severity.UNKNOWN}
    assert all(f.required for f in skipped.values())


def test_recorded_run_without_a_level_asked_is_judged_skips_not_required(
    captures_dir: Path,
) -> None:
    parsed = parse_dcgm_json(_read(captures_dir / "dcgmi", DCGM4_JSON))
    findings = dcgm_check.check(_facts(_diag(parsed, level=None)), Policy(), None)
    assert _findings(findings, "dcgm.sm_stress")[0].severity is Severity.FAIL  # still a FAIL
    memory0 = _findings(findings, "dcgm.memory")[0]
    assert memory0.severity is Severity.UNKNOWN
    assert not memory0.required
    assert not [f for f in findings if f.check == dcgm_check.RUN]


def test_godcgm_text_fragment_fails_gpu0_memory_with_dcgms_words(captures_dir: Path) -> None:
    parsed = parse_dcgm_text(_read(captures_dir / "dcgmi", GODCGM_TEXT))
    memory = _by(parsed, "memory")
    assert memory[1].outcome is DcgmOutcome.PASS
    assert memory[0].outcome is DcgmOutcome.FAIL
    # The 45-column cut falls mid-word ("R"/"estart", "cre"/"ate"): joined without a space.
    assert memory[0].message == (
        "GPU 0 Error using CUDA API cuCtxCreate Check DCGM and system logs for errors. "
        "Reset GPU. Restart DCGM. Rerun diagnostics. Unable to create CUDA context: "
        "'CUDA-capable device(s) is/are busy or unavailable'."
    )
    # The Info rows above the first test row belong to a test the fragment does not show.
    assert {r.test for r in parsed.results} == {"memory"}
    assert "bandwidth" not in memory[1].message
    findings = dcgm_check.check(_facts(_diag(parsed)), LEVEL3, None)
    failed = _findings(findings, "dcgm.memory")[0]
    assert failed.severity is Severity.FAIL
    assert failed.action is Action.RESET_GPU


def test_thermal_text_fragment_fails_gpu0_and_passes_the_other_seven(captures_dir: Path) -> None:
    parsed = parse_dcgm_text(_read(captures_dir / "dcgmi", THERMAL_TEXT))
    memory = _by(parsed, "memory")
    passed = [g for g, r in memory.items() if r.outcome is DcgmOutcome.PASS]
    assert passed == list(range(1, 8))
    assert memory[0].outcome is DcgmOutcome.FAIL
    # "second"/"s started", "GP"/"U 0", "componen"/"ts." and a last line without its "|".
    assert memory[0].message == (
        "GPU 0 Thermal violations totaling 13.3 seconds started at 9.7 seconds into the test "
        "for GPU 0 Verify that the cooling on this machine is functional, including external, "
        "thermal material interface, fans, and any other components."
    )
    assert memory[3].message == ""  # GPU 0's warning is not pinned on the others
    finding = _findings(dcgm_check.check(_facts(_diag(parsed)), LEVEL3, None), "dcgm.memory")[0]
    assert finding.action is Action.CHECK_COOLING_POWER


def test_xid64_text_fragment_is_a_software_fail_on_the_gpu_it_names(captures_dir: Path) -> None:
    parsed = parse_dcgm_text(_read(captures_dir / "dcgmi", XID64_TEXT))
    (result,) = parsed.results
    assert (result.test, result.outcome, result.gpu_index) == ("software", DcgmOutcome.FAIL, 3)
    # " remappings": the cut fell on the space, which stays.
    assert result.message == "GPU 3 has uncorrectable memory errors and row remappings are pending"
    (finding,) = dcgm_check.check(_facts(_diag(parsed)), LEVEL3, None)
    assert finding.severity is Severity.FAIL
    assert finding.gpu_index == 3
    assert finding.action is Action.RESET_GPU


# ---------------------------------------------------------------- public fixtures


def test_dcgm3_json_real_output_with_nulls_and_a_warning_line() -> None:
    parsed = parse_dcgm_json(_read(FIXTURES, DCGM31_JSON))
    assert parsed.version == "3.1.0"
    assert len(parsed.results) == 9 * 8 + 8
    assert {r.outcome for r in parsed.results} == {DcgmOutcome.PASS}
    assert {r.gpu_index for r in parsed.results} == set(range(8))
    names = {r.test for r in parsed.results}
    assert {"software.denylist", "software.permissions_and_os_blocks", "software"} <= names
    assert "software.environment_variables" in names  # "Environmental Variables" in 3.1


def test_dcgm4_text_table_reads_per_gpu_lines_and_the_version() -> None:
    parsed = parse_dcgm_text(_read(FIXTURES, DCGM423_TEXT))
    assert parsed.version == "4.2.3"
    software = _by(parsed, "software")
    assert sorted(software, key=str) == [0, 1, 2, 3]  # no node-wide duplicate
    assert {r.outcome for r in software.values()} == {DcgmOutcome.PASS}


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        "[]",
        '{"something": {}}',
        '{"DCGM GPU Diagnostic": {"version": "4.2.3"}}',
        '{"DCGM Diagnostic": {"test_categories": []}}',
        '{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": '
        '[{"name": "memory", "results": [{"entity_id": 0, "status": "Maybe"}]}]}]}}',
    ],
)
def test_json_that_holds_no_result_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_dcgm_json(text)


def test_an_unsupported_gpu_says_dcgmis_words() -> None:
    with pytest.raises(ParseError, match="Unable to run diagnostic on unsupported GPU 0"):
        parse_dcgm_json(
            "Error: Unable to run diagnostic on unsupported GPU 0.\n"
            '{"DCGM GPU Diagnostic":{"version":"4.2.3"}}'
        )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Successfully ran diagnostic for group.\n",
        "+---------------------------+------------------------------------------------+\n"
        "| Diagnostic                | Result                                         |\n",
        # Notes with no test row above them: nothing to judge, never an empty pass.
        "| Info                      | GPU 1 GPU to Host bandwidth:  12.33 GB/s, GPU  |\n",
    ],
)
def test_text_that_holds_no_result_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse_dcgm_text(text)


def test_a_runtime_error_is_no_result() -> None:
    parsed = parse_dcgm_json(
        '{"DCGM Diagnostic": {"runtime_error": "The GPU list is empty", "version": "4.4.1"}}'
    )
    assert parsed.results == ()
    assert parsed.runtime_error == "The GPU list is empty"


@pytest.mark.parametrize(
    ("name", "category", "expected"),
    [
        ("SM Stress", "stress", "sm_stress"),
        ("PCIe", "integration", "pcie"),
        ("Targeted Power", "stress", "targeted_power"),
        ("GPU Memory", "hardware", "memory"),
        ("Denylist", "deployment", "software.denylist"),
        ("software", "deployment", "software"),
        ("memtest", "hardware", "memtest"),
    ],
)
def test_names_follow_dcgm4(name: str, category: str, expected: str) -> None:
    assert dcgm_test_name(name, category) == expected


# ---------------------------------------------------------------- the runner


class FakeDcgmi:
    """A host whose dcgmi answers one way, recording what it was asked."""

    def __init__(self, result: CommandResult | None) -> None:
        self.result = result  # None: dcgmi is not installed
        self.calls: list[tuple[tuple[str, ...], float]] = []

    def hostname(self) -> str:
        return "node"

    def read_text(self, path: str) -> str | None:
        return None

    def glob(self, pattern: str) -> list[str]:
        return []

    def which(self, name: str) -> str | None:
        return "/usr/bin/dcgmi" if name == "dcgmi" and self.result is not None else None

    def run(self, argv: Sequence[str], timeout_s: float = 30.0) -> CommandResult:
        self.calls.append((tuple(argv), timeout_s))
        return self.result or CommandResult(127, "", "dcgmi: command not found")

    def now(self) -> datetime.datetime:
        return datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)


def test_missing_dcgmi_says_how_to_install_it() -> None:
    diag = run_dcgm(FakeDcgmi(None), 3)
    assert isinstance(diag.results, Unavailable)
    assert diag.results.reason is Reason.NOT_SUPPORTED
    assert diag.results.detail == NOT_FOUND
    assert "datacenter-gpu-manager-4" in NOT_FOUND
    assert "dcgm role" in NOT_FOUND


def test_runner_asks_for_json_at_the_level_within_its_timeout(captures_dir: Path) -> None:
    text = _read(captures_dir / "dcgmi", DCGM4_JSON)
    host = FakeDcgmi(CommandResult(205, text))  # a failing test: dcgmi exits non-zero
    diag, recorded = run_dcgmi(host, 2, None)
    assert host.calls == [(("dcgmi", "diag", "-r", "2", "-j"), DEFAULT_TIMEOUT_S[2])]
    assert recorded == text
    assert diag.level == 2
    assert diag.source == "dcgmi diag -r 2 -j"
    assert not isinstance(diag.results, Unavailable)
    assert any(r.outcome is DcgmOutcome.FAIL for r in diag.results)


def test_timeout_is_an_error_naming_it() -> None:
    host = FakeDcgmi(CommandResult(124, "", "dcgmi: timed out after 90 s"))
    diag = run_dcgm(host, 3, 90.0)
    assert host.calls[0][1] == 90.0
    assert diag.results == Unavailable(Reason.ERROR, "dcgmi diag -r 3 -j timed out after 90 s")


def test_host_engine_down_is_an_error_in_dcgmis_words() -> None:
    diag = run_dcgm(FakeDcgmi(CommandResult(235, HOST_ENGINE_DOWN)), 1)
    assert isinstance(diag.results, Unavailable)
    assert diag.results.reason is Reason.ERROR
    detail = diag.results.detail
    assert detail.startswith("dcgmi diag -r 1 -j exited 235: Error: unable to establish")
    assert "Host engine connection invalid/disconnected" in detail
    assert "systemctl start nvidia-dcgm" in detail
    assert "\n" not in detail


def test_readable_but_empty_output_is_no_pass() -> None:
    diag = run_dcgm(FakeDcgmi(CommandResult(0, "Successfully ran diagnostic for group.\n")), 1)
    assert isinstance(diag.results, Unavailable)
    assert diag.results.reason is Reason.ERROR
    assert "printed no diagnostic results" in diag.results.detail


# ---------------------------------------------------------------- the check


def test_policy_level_and_no_dcgmi_is_a_required_unknown_fixing_the_software() -> None:
    (finding,) = dcgm_check.check(_facts(run_dcgm(FakeDcgmi(None), 3)), LEVEL3, None)
    assert (finding.check, finding.severity, finding.required) == (
        "dcgm.run",
        Severity.UNKNOWN,
        True,
    )
    assert "dcgmi not found: install DCGM" in finding.message
    assert finding.action is Action.FIX_SOFTWARE


def test_nothing_asked_and_nothing_run_says_nothing() -> None:
    assert dcgm_check.check(_facts(None), Policy(), None) == []


def test_level_asked_but_not_run_is_a_required_unknown() -> None:
    (finding,) = dcgm_check.check(_facts(None), LEVEL3, None)
    assert finding.check == "dcgm.run"
    assert finding.required
    assert finding.severity is Severity.UNKNOWN


def test_a_lower_level_than_asked_is_a_required_unknown(captures_dir: Path) -> None:
    parsed = parse_dcgm_json(_read(captures_dir / "dcgmi", DCGM4_JSON))
    findings = dcgm_check.check(_facts(_diag(parsed, level=2)), LEVEL3, None)
    run = [f for f in findings if f.check == "dcgm.run"]
    assert len(run) == 1
    assert run[0].required
    assert run[0].severity is Severity.UNKNOWN
    assert "level 2" in run[0].message
    assert "level 3" in run[0].message


def test_a_dcgm_reset_severity_error_resets_the_gpu() -> None:
    result = DcgmTestResult(
        "software.page_retirement_row_remap",
        DcgmOutcome.FAIL,
        "deployment",
        1,
        "Pending row remap",
        error_id=85,
    )
    diag = DcgmDiag(level=3, source="test", results=(result,))
    (finding,) = dcgm_check.check(_facts(diag), LEVEL3, None)
    assert finding.action is Action.RESET_GPU
    assert finding.action_source == "DCGM error severity RESET (DCGM_FR_PENDING_ROW_REMAP)"


@pytest.mark.parametrize(
    ("test", "category", "action"),
    [
        ("pcie", "integration", Action.RESEAT_CABLE_RISER),
        ("targeted_power", "stress", Action.CHECK_COOLING_POWER),
        ("memory_bandwidth", "stress", Action.DRAIN_RMA),
        ("software.persistence_mode", "deployment", Action.FIX_SOFTWARE),
    ],
)
def test_actions_by_test(test: str, category: str, action: Action) -> None:
    diag = DcgmDiag(
        level=3, source="t", results=(DcgmTestResult(test, DcgmOutcome.FAIL, category, 0),)
    )
    (finding,) = dcgm_check.check(_facts(diag), LEVEL3, None)
    assert finding.action is action
    assert finding.action_source


# ---------------------------------------------------------------- scenarios and plumbing


def test_scenario_fails_memtest_on_gpu3_with_drain_and_rma() -> None:
    facts = collect_simulated("dcgm-memtest-failure", dcgm_level=3)
    assert facts.dcgm is not None
    assert facts.dcgm.level == 3
    findings = dcgm_check.check(facts, LEVEL3, None)
    failed = [f for f in findings if f.severity is not Severity.PASS]
    assert {(f.check, f.gpu_index) for f in failed} == {("dcgm.memtest", 3), ("dcgm.memory", 3)}
    memtest = _findings(findings, "dcgm.memtest")[3]
    assert memtest.action is Action.DRAIN_RMA
    assert memtest.gpu_uuid is not None  # named by the node's own GPU
    assert "A memory mismatch was detected on GPU 3" in memtest.message


def test_a_healthy_dcgm4_run_passes_every_test() -> None:
    # The scenario's DCGM 4 output with GPU 3 passing as its peers do.
    scenario = json.loads(
        (Path(agent.__file__).parent / "scenarios" / "dcgm-memtest-failure.json").read_text()
    )
    output = json.loads(scenario["commands"]["dcgmi diag -r * -j"]["stdout"])
    for category in output["DCGM Diagnostic"]["test_categories"]:
        for test in category["tests"]:
            test["test_summary"] = {"status": "Pass"}
            for row in test["results"]:
                row["status"] = "Pass"
                row.pop("warnings", None)
    host = FakeDcgmi(CommandResult(0, json.dumps(output)))
    findings = dcgm_check.check(_facts(run_dcgm(host, 3)), LEVEL3, None)
    assert len(findings) == 8 * 8
    assert {f.severity for f in findings} == {Severity.PASS}


def test_a_scenario_without_dcgmi_runs_none() -> None:
    facts = collect_simulated("healthy-8x-h100-sxm", dcgm_level=2)
    assert facts.dcgm is not None
    assert isinstance(facts.dcgm.results, Unavailable)
    assert facts.dcgm.results.reason is Reason.NOT_SUPPORTED
    assert collect_simulated("healthy-8x-h100-sxm").dcgm is None


def test_dcgm_facts_survive_json_round_trip() -> None:
    facts = collect_simulated("dcgm-memtest-failure", dcgm_level=4)
    assert from_dict(NodeFacts, json.loads(json.dumps(to_dict(facts)))).dcgm == facts.dcgm


def test_agent_request_passes_the_dcgm_flags() -> None:
    host = HostSpec(name="gpu1", address="10.0.0.1")
    assert "--dcgm-level" not in AgentRequest().arguments(host)
    args = AgentRequest(dcgm_level=3, dcgm_timeout_s=900.0).arguments(host, deadline_s=1200.0)
    assert args[args.index("--dcgm-level") + 1] == "3"
    assert args[args.index("--dcgm-timeout") + 1] == "900.0"
    parsed = agent._parser().parse_args(args)
    assert (parsed.dcgm_level, parsed.dcgm_timeout, parsed.deadline) == (3, 900.0, 1200.0)


def test_agent_runs_dcgm_after_collecting(capsys: pytest.CaptureFixture[str]) -> None:
    assert agent.run(["--simulate", "dcgm-memtest-failure", "--dcgm-level", "3"]) == 0
    facts = from_dict(NodeFacts, json.loads(capsys.readouterr().out))
    assert facts.dcgm is not None
    assert facts.dcgm.source == "dcgmi diag -r 3 -j"
    assert not isinstance(facts.dcgm.results, Unavailable)


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf"])
def test_agent_refuses_a_bad_dcgm_timeout(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert agent.run(["--dcgm-level", "1", "--dcgm-timeout", value]) == 2
    assert "--dcgm-timeout must be" in capsys.readouterr().err


def test_deadline_cuts_dcgm_to_fit_or_says_no_time() -> None:
    assert collector.dcgm_within(3, None, 100_000.0) == DEFAULT_TIMEOUT_S[3]
    cut = collector.dcgm_within(3, None, 600.0)
    assert cut is not None
    assert cut < 600.0
    assert collector.dcgm_within(3, 30.0, 600.0) == 30.0
    assert collector.dcgm_within(1, None, 1.0) is None


def test_deadline_with_no_time_left_for_dcgm_says_so() -> None:
    import time

    asked = CollectRequest(dcgm_level=3, interconnect="off")
    facts = collector.collect(
        SimulatedSource("dcgm-memtest-failure"), asked, until=time.monotonic() + 0.5
    )
    assert facts.dcgm is not None
    assert isinstance(facts.dcgm.results, Unavailable)
    assert "the deadline left no time" in facts.dcgm.results.detail


# ---------------------------------------------------------------- bundles


def _bundle(tmp_path: Path, captures_dir: Path, name: str, as_name: str) -> Path:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "hostname.txt").write_text("node\n")
    shutil.copyfile(captures_dir / "dcgmi" / name, bundle / as_name)
    return bundle


def test_bundle_json_is_judged_whatever_the_level(tmp_path: Path, captures_dir: Path) -> None:
    bundle = _bundle(tmp_path, captures_dir, DCGM4_JSON, "dcgmi-diag.json")
    facts = collect_capture(bundle)
    assert facts.dcgm is not None
    assert facts.dcgm.source == "dcgmi-diag.json"
    assert facts.dcgm.level is None  # no meta.json says which level ran
    findings = dcgm_check.check(facts, Policy(), None)
    assert _findings(findings, "dcgm.sm_stress")[0].severity is Severity.FAIL


def test_bundle_text_is_read_when_no_json(tmp_path: Path, captures_dir: Path) -> None:
    bundle = _bundle(tmp_path, captures_dir, THERMAL_TEXT, "dcgmi-diag.txt")
    facts = collect_capture(bundle, dcgm_level=2)
    assert facts.dcgm is not None
    assert facts.dcgm.source == "dcgmi-diag.txt"
    findings = dcgm_check.check(facts, dataclasses.replace(Policy(), dcgm_level=2), None)
    run = [f for f in findings if f.check == "dcgm.run"]
    assert run
    assert run[0].required
    assert "does not say which level ran" in run[0].message


def test_bundle_without_dcgm_output_at_a_level_says_how_to_capture(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "hostname.txt").write_text("node\n")
    assert collect_capture(bundle).dcgm is None
    facts = collect_capture(bundle, dcgm_level=3)
    (finding,) = dcgm_check.check(facts, LEVEL3, None)
    assert finding.check == "dcgm.run"
    assert finding.required
    assert "the bundle has no DCGM output" in finding.message
    assert "gpuready capture --dcgm-level 3" in finding.message


def test_a_broken_bundle_file_is_bad_input(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "dcgmi-diag.json").write_text('{"DCGM Diagnostic": {"test_ca')
    not_json = r"dcgmi-diag\.json: dcgmi diag output is not valid JSON"
    with pytest.raises(CaptureError, match=not_json):
        collect_capture(bundle)


def test_capture_writes_the_diagnostic_and_its_level(tmp_path: Path) -> None:
    from validator.node.capture.capture_replay import write_capture
    from validator.node.sim.scenario import load_scenario

    outcome = write_capture(
        tmp_path / "b", load_scenario("dcgm-memtest-failure").system(), dcgm_level=3
    )
    assert outcome["dcgmi-diag.json"] == "written"
    meta = json.loads((tmp_path / "b" / "meta.json").read_text())
    assert meta["dcgm_level"] == 3
    facts = collect_capture(tmp_path / "b", dcgm_level=3)
    assert facts.dcgm is not None
    assert facts.dcgm.level == 3
    findings = dcgm_check.check(facts, LEVEL3, None)
    assert not [f for f in findings if f.check == "dcgm.run"]
    assert _findings(findings, "dcgm.memtest")[3].severity is Severity.FAIL


def test_capture_without_dcgmi_leaves_the_file_out_and_says_why(tmp_path: Path) -> None:
    from validator.node.capture.capture_replay import write_capture
    from validator.node.sim.scenario import load_scenario

    outcome = write_capture(
        tmp_path / "b", load_scenario("healthy-8x-h100-sxm").system(), dcgm_level=1
    )
    assert outcome["dcgmi-diag.json"].startswith("skipped: not supported (dcgmi not found")
    assert not (tmp_path / "b" / "dcgmi-diag.json").exists()
    assert "dcgm_level" not in json.loads((tmp_path / "b" / "meta.json").read_text())


# ---------------------------------------------------------------- the command line


@pytest.mark.parametrize("command", ["certify", "capture"])
@pytest.mark.parametrize("value", ["7", "-1", "x", "2.5"])
def test_a_bad_dcgm_level_is_one_line_and_exit_2(
    command: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from validator.cli.main import main

    args = [command, "--dcgm-level", value]
    args += (
        [str(tmp_path / "bundle")]
        if command == "capture"
        else ["--simulate", "healthy-8x-h100-sxm"]
    )
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err == (
        f"gpuready: error: --dcgm-level must be a whole number from 0 up to 4, got '{value}'\n"
    )
    assert not (tmp_path / "bundle").exists()


def test_capture_command_writes_the_dcgm_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from validator.cli.main import main

    bundle = tmp_path / "bundle"
    code = main(["capture", "--simulate", "dcgm-memtest-failure", "--dcgm-level", "4", str(bundle)])
    assert code == 0
    assert "dcgmi-diag.json            written" in capsys.readouterr().out
    assert json.loads((bundle / "meta.json").read_text())["dcgm_level"] == 4


# ---------------------------------------------------------------- the service layer


def test_policy_dcgm_reaches_every_agent_and_the_host_deadline() -> None:
    from validator.service.collect_and_judge import DEADLINE_MARGIN_S, agent_request, host_deadline

    policy = dataclasses.replace(Policy(), dcgm_level=2, dcgm_timeout_s=900.0)
    request = agent_request(None, policy)
    assert (request.dcgm_level, request.dcgm_timeout_s) == (2, 900.0)
    assert host_deadline(None, None, policy) == 900.0 + DEADLINE_MARGIN_S
    level3 = dataclasses.replace(Policy(), dcgm_level=3)
    assert host_deadline(None, None, level3) == DEFAULT_TIMEOUT_S[3] + DEADLINE_MARGIN_S
    assert host_deadline(None, None, Policy()) == DEADLINE_MARGIN_S
    assert host_deadline(60.0, None, level3) == 60.0  # a given deadline binds


def test_a_request_without_a_dcgm_level_keeps_the_policys() -> None:
    from validator.service.certify_service import CertifyRequest
    from validator.service.collect_and_judge import effective_policy

    assert CertifyRequest(reach=Reach(inventories=("inv",))).fleet().dcgm_level is None
    assert effective_policy(None, None).dcgm_level == 0
    assert effective_policy(None, 4).dcgm_level == 4


def test_certify_node_runs_dcgm_at_the_level_asked() -> None:
    from validator.service.certify_service import CertifyRequest, certify_node

    report = certify_node(CertifyRequest(simulate="dcgm-memtest-failure", dcgm_level=3))
    (node,) = report.nodes
    assert node.facts.dcgm is not None
    assert node.facts.dcgm.source == "dcgmi diag -r 3 -j"
    with_deadline = certify_node(
        CertifyRequest(simulate="dcgm-memtest-failure", dcgm_level=3, deadline_s=120.0)
    )
    dcgm = with_deadline.nodes[0].facts.dcgm
    assert dcgm is not None
    assert not isinstance(dcgm.results, Unavailable)


class _Phases:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def phase(self, host: str, phase: object) -> None:
        self.seen.append(str(phase))


def test_local_transport_runs_dcgm_as_the_request_asks() -> None:
    from validator.remote.local import LocalTransport

    host = HostSpec(name="gpu1", address="gpu1", simulate="dcgm-memtest-failure")
    outcome = LocalTransport().run_agent(host, AgentRequest(dcgm_level=2), 60.0, _Phases())
    assert outcome.facts is not None
    assert outcome.facts.dcgm is not None
    assert outcome.facts.dcgm.source == "dcgmi diag -r 2 -j"


# ---------------------------------------------------------------- review fixes


def _dcgm3(rows: Sequence[Mapping[str, object]], test: str = "Page Retirement/Row Remap") -> str:
    """A DCGM 3 JSON document with one deployment test of the given result rows."""
    category = {"category": "Deployment", "tests": [{"name": test, "results": rows}]}
    return json.dumps({"DCGM GPU Diagnostic": {"test_categories": [category]}})


# A deployment row as DCGM 3 prints it: one row for the four GPUs, the warning naming one.
REMAP_PENDING = "GPU 3 has uncorrectable memory errors and row remappings are pending"


def test_dcgm3_several_gpu_fail_is_pinned_on_the_gpu_its_warning_names() -> None:
    row = {
        "gpu_ids": "0,1,2,3",
        "status": "FAIL",
        "warnings": [{"warning": REMAP_PENDING, "error_id": 85}],
    }
    parsed = parse_dcgm_json(_dcgm3([row]))
    (result,) = parsed.results
    assert (result.test, result.gpu_index, result.outcome) == (
        "software.page_retirement_row_remap",
        3,
        DcgmOutcome.FAIL,
    )
    assert (result.message, result.error_id) == (REMAP_PENDING, 85)
    findings = dcgm_check.check(_facts(_diag(parsed)), LEVEL3, None)
    assert [(f.gpu_index, f.severity, f.action) for f in findings] == [
        (3, Severity.FAIL, Action.RESET_GPU)
    ]


def test_dcgm3_several_gpu_warnings_each_go_to_their_gpu_with_their_error_id() -> None:
    row = {
        "gpu_ids": "0,1,2,3",
        "status": "FAIL",
        "warnings": [
            {"warning": "GPU 1 thermal violation: cooling", "error_id": 30},
            {"warning": REMAP_PENDING, "error_id": 85},
        ],
    }
    by_gpu = {r.gpu_index: r for r in parse_dcgm_json(_dcgm3([row])).results}
    assert set(by_gpu) == {1, 3}
    assert (by_gpu[1].message, by_gpu[1].error_id) == ("GPU 1 thermal violation: cooling", 30)
    assert (by_gpu[3].message, by_gpu[3].error_id) == (REMAP_PENDING, 85)


@pytest.mark.parametrize(
    "warning",
    ["Persistence mode is disabled", "GPU 9 has uncorrectable memory errors"],
)
def test_dcgm3_several_gpu_fail_not_pinned_stays_on_every_gpu(warning: str) -> None:
    # No GPU named, or one not in the row: the fault cannot be pinned (fail closed).
    row = {"gpu_ids": "0,1", "status": "FAIL", "warnings": [{"warning": warning}]}
    results = parse_dcgm_json(_dcgm3([row])).results
    assert [(r.gpu_index, r.outcome) for r in results] == [
        (0, DcgmOutcome.FAIL),
        (1, DcgmOutcome.FAIL),
    ]


def test_dcgm4_capture_fails_sm_stress_on_gpus_0_2_and_3(captures_dir: Path) -> None:
    # The SOURCES row names GPU 0; the file fails GPUs 2 and 3 as well.
    parsed = parse_dcgm_json(_read(captures_dir / "dcgmi", DCGM4_JSON))
    stress = _by(parsed, "sm_stress")
    assert {gpu: r.outcome for gpu, r in stress.items()} == {
        0: DcgmOutcome.FAIL,
        1: DcgmOutcome.PASS,
        2: DcgmOutcome.FAIL,
        3: DcgmOutcome.FAIL,
    }
    assert stress[2].message.startswith("Max stress level of 1096.5 did not exceed")
    assert stress[3].message.startswith("Max stress level of 1099.7 did not exceed")
    findings = _findings(dcgm_check.check(_facts(_diag(parsed)), LEVEL3, None), "dcgm.sm_stress")
    assert {gpu for gpu, f in findings.items() if f.severity is Severity.FAIL} == {0, 2, 3}


@pytest.mark.parametrize(
    ("policy", "severity", "required"),
    [(LEVEL3, Severity.UNKNOWN, True), (Policy(), Severity.WARN, True)],
)
def test_a_warning_at_a_required_level_is_a_required_unknown(
    policy: Policy, severity: Severity, required: bool
) -> None:
    warned = DcgmTestResult("pcie", DcgmOutcome.WARN, "integration", 0, "PCIe replays 12")
    (finding,) = dcgm_check.check(_facts(DcgmDiag(3, "t", results=(warned,))), policy, None)
    assert (finding.severity, finding.required) == (severity, required)
    assert finding.action is Action.RESEAT_CABLE_RISER
    if severity is Severity.UNKNOWN:
        assert finding.message == (
            "DCGM pcie warned (a warning at the level asked proves no pass) on GPU 0: "
            "PCIe replays 12"
        )


@pytest.mark.parametrize(
    ("result", "action"),
    [
        (DcgmTestResult("sm_stress", DcgmOutcome.FAIL, "stress", 0), Action.CHECK_COOLING_POWER),
        (
            DcgmTestResult("memory", DcgmOutcome.FAIL, "hardware", 0, REMAP_PENDING),
            Action.RESET_GPU,
        ),
        (DcgmTestResult("memory", DcgmOutcome.FAIL, "hardware", 0, "", 84), Action.RESET_GPU),
        (
            DcgmTestResult("memory", DcgmOutcome.FAIL, "hardware", 0, "Thermal violations"),
            Action.CHECK_COOLING_POWER,
        ),
        (DcgmTestResult("context_create", DcgmOutcome.FAIL, "", 0), Action.FIX_SOFTWARE),
        (DcgmTestResult("nvbandwidth", DcgmOutcome.FAIL, "", 0), Action.RESEAT_CABLE_RISER),
        (DcgmTestResult("eud", DcgmOutcome.FAIL, "", 0), Action.DRAIN_RMA),
        (DcgmTestResult("memory", DcgmOutcome.SKIP, "hardware", 0), Action.RERUN),
    ],
)
def test_the_one_action_decision_is_public(result: DcgmTestResult, action: Action) -> None:
    # Drift calls this same function (tests/drift/test_drift_interconnect.py).
    assert dcgm_check.action_for_result(result)[0] is action
    (finding,) = dcgm_check.check(_facts(DcgmDiag(3, "t", results=(result,))), LEVEL3, None)
    assert (finding.action, finding.action_source) == dcgm_check.action_for_result(result)


def _certify_bundle(tmp_path: Path, name: str, text: str) -> tuple[int, str]:
    from validator.cli.main import main

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "hostname.txt").write_text("node\n")
    (bundle / name).write_text(text)
    return main(["certify", "--capture", str(bundle), "--burn", "0"]), str(bundle)


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("dcgmi-diag.json", "[" * 100_000, "not valid JSON (nested too deeply)"),
        (
            "dcgmi-diag.txt",
            "+---------------------------+------------------------------------------------+\n"
            "|-----  Hardware  ----------+------------------------------------------------|\n"
            f"| Memory                    | Pass - GPU: {'9' * 5000} |\n",
            "not a GPU index",
        ),
        (
            "dcgmi-diag.json",
            _dcgm3([{"gpu_ids": "9" * 5000, "status": "Pass"}], "Memory"),
            "names an entity",
        ),
    ],
)
def test_hostile_dcgm_output_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str, problem: str
) -> None:
    code, _ = _certify_bundle(tmp_path, name, text)
    err = capsys.readouterr().err
    assert code == 2, err[-2000:]
    assert err.startswith("gpuready: error: ")
    assert err.count("\n") == 1
    assert name in err
    assert problem in err
    assert "Traceback" not in err


def test_the_memtest_scenario_says_it_certifies_without_a_level(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from validator.cli.main import main

    assert main(["scenarios"]) == 0
    (line,) = [row for row in capsys.readouterr().out.splitlines() if "dcgm-memtest" in row]
    assert "certify with --dcgm-level 3 (or a policy with dcgm_level) to see it fail" in line


def test_a_hosts_own_dcgm_level_reaches_its_agent_only(tmp_path: Path) -> None:
    # gpuready_dcgm_level on one host: its agent runs DCGM at that level, the others not.
    from tests.remote.test_deadline import write_inventory
    from validator.model import TransportName
    from validator.service.collect_and_judge import FleetRequest, certify_fleet

    inventory = write_inventory(
        tmp_path / "hosts.yml",
        {
            "gpu-a": {"gpuready_simulate": "dcgm-memtest-failure", "gpuready_dcgm_level": 3},
            "gpu-b": {"gpuready_simulate": "dcgm-memtest-failure"},
        },
    )
    report = certify_fleet(
        FleetRequest(
            Reach(inventories=(str(inventory),), transport=TransportName.LOCAL),
            burn=BurnConfig(duration_s=1.0),
        )
    )
    nodes = {node.hostname: node for node in report.nodes}
    failed = {f.check for f in nodes["gpu-a"].findings if f.severity.value == "FAIL"}
    assert failed == {"dcgm.memory", "dcgm.memtest"}
    assert nodes["gpu-a"].facts.dcgm is not None
    assert nodes["gpu-a"].facts.dcgm.level == 3
    assert nodes["gpu-b"].facts.dcgm is None  # level 0: DCGM not run
    assert nodes["gpu-b"].verdict.value == "CERTIFIED"


def test_the_agent_request_carries_only_the_hosts_that_differ() -> None:
    from validator.model import HostSpec
    from validator.service.collect_and_judge import agent_request, longest_dcgm

    base = Policy()
    own = {"a": dataclasses.replace(base, dcgm_level=4), "b": base}
    request = agent_request(None, base, own)
    assert request.dcgm_by_host == (("a", 4, None),)
    assert "--dcgm-level" not in request.arguments(HostSpec(name="b", address="b"))
    assert request.arguments(HostSpec(name="a", address="a"))[-2:] == ["--dcgm-level", "4"]
    assert longest_dcgm(base, own).dcgm_level == 4  # the fan-out's deadline fits it


def test_a_pass_on_a_gpu_the_node_does_not_list_is_no_pass() -> None:
    # The real 8-GPU DCGM result beside a 1-GPU node (issue 30): GPUs 1-7 do not exist.
    parsed = parse_dcgm_json(_read(FIXTURES, DCGM31_JSON))
    facts = dataclasses.replace(_facts(_diag(parsed)), gpus=(GpuFacts(index=0),))
    findings = dcgm_check.check(facts, LEVEL3, None)
    on_gpu = [f for f in findings if f.gpu_index is not None]
    assert {f.gpu_index for f in on_gpu} == set(range(8))
    for finding in on_gpu:
        if finding.gpu_index == 0:
            assert finding.severity is Severity.PASS
        else:
            assert finding.severity is Severity.UNKNOWN
            assert finding.required
            assert "does not list" in finding.message
            assert finding.action is Action.RERUN
