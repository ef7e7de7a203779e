"""Advice that helps: "run it again" only where the cause is transient (issue 33).

Transient, as validator.judge.checks.advice defines it: a check whose default row is
for a passing fault (TRANSIENT_CHECKS), a source a check sets for one
(TRANSIENT_SOURCES), or a reading that failed this once. Everything else gets the step
that can change the outcome. Walked over every built-in scenario (with and without a
burn) and over capture bundles of the shared corpus's real outputs.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.collecting import collect_capture, collect_simulated
from validator.error_tree import CaptureError
from validator.judge import judge_node
from validator.judge.checks.advice import (
    CAPTURE_FILES,
    DCGM_AT_LEVEL,
    RECORDED_TREES,
    TRANSIENT_CHECKS,
    capture_advice,
    is_transient,
)
from validator.judge.policy import Policy
from validator.model import ACTION_WORDS, Action, NodeFacts, NodeResult, Severity
from validator.node.burnin.burn_config import BurnConfig
from validator.node.capture import capture_replay
from validator.node.capture.capture_replay import BUNDLE, KNOWN_FILES
from validator.node.sim.scenario import builtin_names

RERUN_WORDS = ACTION_WORDS[Action.RERUN]  # "run it again"
SHORT_BURN = BurnConfig(duration_s=0.2)
DOC = capture_replay.__doc__ or ""


def _judged(facts: NodeFacts) -> NodeResult:
    return judge_node(facts, Policy())


def _reruns_not_transient(result: NodeResult) -> list[str]:
    return [
        f"{result.hostname}: {f.check} {f.severity.value} gpu={f.gpu_index} ({f.action_source}): "
        f"{f.message}"
        for f in result.findings
        if f.action is Action.RERUN and not is_transient(f)
    ]


@pytest.fixture(scope="module")
def scenario_results() -> list[NodeResult]:
    results = []
    for name in builtin_names():
        results.append(_judged(collect_simulated(name)))
        results.append(_judged(collect_simulated(name, burn=SHORT_BURN)))
    return results


def test_every_scenario_says_run_it_again_only_for_a_transient_cause(
    scenario_results: list[NodeResult],
) -> None:
    bad = [line for result in scenario_results for line in _reruns_not_transient(result)]
    assert bad == []
    # The walk meets the causes a rerun cannot clear, and the transient ones it can.
    seen = {(f.check, f.action) for r in scenario_results for f in r.findings}
    assert ("burn.run", Action.MEASURE) in seen  # --burn 0
    assert any(action is Action.RERUN for _, action in seen)  # an application's Xid


def test_no_driver_is_never_run_it_again(scenario_results: list[NodeResult]) -> None:
    for result in scenario_results:
        if result.facts.nvml_status.value == "ok":
            continue
        reruns = [f.check for f in result.findings if f.action is Action.RERUN]
        assert reruns == [], result.hostname


def _corpus_bundles(root: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """Bundles of real outputs: each query alone, the banner alone, a fuller one."""
    for path in sorted((root / "nvidia-smi-q").glob("*.txt")):
        yield f"q:{path.name}", {"nvidia-smi-q.txt": path.read_text(encoding="utf-8")}
    for path in sorted((root / "nvidia-smi-xml").glob("*.xml")):
        yield f"xml:{path.name}", {"nvidia-smi-q.xml": path.read_text(encoding="utf-8")}
    banner = root / "nvidia-smi-banner" / "gls-H100SXMx8-565.57.01.txt"
    yield "banner", {"nvidia-smi.txt": banner.read_text(encoding="utf-8")}
    yield (
        "fuller",
        {
            "nvidia-smi-q.txt": (root / "nvidia-smi-q" / "gls-H100SXMx8-565.57.01.txt").read_text(),
            "nvidia-smi.txt": banner.read_text(encoding="utf-8"),
            "dmesg.txt": (root / "xid" / "gpud-xid79-sxid20034-nvswitch.log").read_text(),
            "nvcc.txt": (root / "nvcc" / "repo-ngc-test-nvcc-11.6.55.txt").read_text(),
        },
    )


def test_a_capture_never_says_run_it_again_and_names_the_file_to_capture(
    tmp_path: Path, captures_dir: Path
) -> None:
    judged = 0
    for name, files in _corpus_bundles(captures_dir):
        folder = tmp_path / name.replace(":", "-")
        folder.mkdir()
        for file_name, text in files.items():
            (folder / file_name).write_text(text, encoding="utf-8")
        try:
            result = _judged(collect_capture(folder))
        except CaptureError:
            continue  # a file the bundle reader refuses is bad input, judged elsewhere
        judged += 1
        for finding in result.findings:
            # Certify the same bundle again and it says the same: a capture has no rerun.
            assert finding.action is not Action.RERUN, (name, finding.check, finding.message)
            if finding.action is Action.MEASURE and not finding.check.startswith("burn."):
                how, _ = capture_advice(finding.check)
                # The file and how to make it, or the whole bundle again, in one go.
                assert (
                    how in finding.message or "re-capture the bundle in one go" in finding.message
                ), (name, finding.message)
    assert judged >= 10


def test_the_banner_only_capture_of_the_issue(tmp_path: Path, captures_dir: Path) -> None:
    (tmp_path / "nvidia-smi.txt").write_text(
        (captures_dir / "nvidia-smi-banner" / "gls-H100SXMx8-565.57.01.txt").read_text()
    )
    result = _judged(collect_capture(tmp_path))
    by_check = {(f.check, f.gpu_index): f for f in result.findings}
    xid = by_check["errors.xid", None]
    assert xid.action is Action.MEASURE
    assert xid.message.endswith(
        "dmesg.txt not in the capture; capture dmesg.txt on the host: dmesg > dmesg.txt "
        "(gpuready capture records it)"
    )
    ecc = by_check["memory.ecc_mode", 0]
    assert "capture nvidia-smi-q.xml on the host: nvidia-smi -q -x > nvidia-smi-q.xml" in (
        ecc.message
    )
    burn = by_check["burn.run", None]
    assert burn.action is Action.MEASURE
    assert "a capture holds no burn-in: certify the host itself" in burn.message


def test_the_capture_files_are_the_bundle_tables() -> None:
    table = {entry.name: entry for entry in BUNDLE}
    for file_name, command in CAPTURE_FILES.values():
        assert file_name in KNOWN_FILES
        entry = table[file_name]
        made, _, into = command.rpartition(" > ")
        assert into == file_name
        if entry.tree:  # a sysfs tree, a line a file: the command walks that tree
            assert f"{entry.tree}/" in made, file_name
        elif entry.argv:
            assert tuple(shlex.split(made)) == entry.argv, file_name
        elif entry.paths:
            assert shlex.split(made)[-1] in entry.paths, file_name
        else:  # recorded from the tool's own run: the module's table names the tool
            row = next(line for line in DOC.splitlines() if line.startswith(f"``{file_name}``"))
            assert f"``{shlex.split(made)[0]}" in row, file_name
    for prefix, (file_name, root) in RECORDED_TREES.items():
        assert prefix in CAPTURE_FILES  # the fallback a shell command makes
        row = next(line for line in DOC.splitlines() if line.startswith(f"``{file_name}``"))
        assert f"``{root}``" in row, file_name


def test_no_burn_asked_for_is_measured_not_rerun() -> None:
    result = _judged(collect_simulated("healthy-8x-h100-sxm"))
    (burn,) = [f for f in result.findings if f.check == "burn.run"]
    assert (burn.severity, burn.action) == (Severity.UNKNOWN, Action.MEASURE)
    assert "--burn" in burn.action_source


def test_a_missing_python_package_is_installed_not_rerun() -> None:
    facts = collect_simulated("healthy-8x-h100-sxm", burn=SHORT_BURN)
    assert facts.burn is not None
    missing = dataclasses.replace(
        facts.burn, gpus=(), error="no burn backend can run: numpy: No module named 'numpy'"
    )
    result = _judged(dataclasses.replace(facts, burn=missing))
    (burn,) = [f for f in result.findings if f.check == "burn.run"]
    assert burn.action is Action.FIX_SOFTWARE
    assert "pip install numpy" in burn.action_source


def test_a_lifetime_ecc_count_takes_its_gpus_remap_step(
    scenario_results: list[NodeResult],
) -> None:
    (result,) = [r for r in scenario_results if r.hostname and _has_remap(r)][:1]
    (lifetime,) = [
        f for f in result.findings
        if f.check == "errors.ecc_uncorrected_aggregate" and f.severity is Severity.WARN
    ]  # fmt: skip
    assert lifetime.action is Action.RESET_GPU  # the pending remap's reset applies it
    assert lifetime.action_source.startswith("gpuready: explained by errors.row_remap")


def _has_remap(result: NodeResult) -> bool:
    return any(
        f.check == "errors.row_remap" and f.severity is Severity.FAIL for f in result.findings
    )


def test_a_lifetime_ecc_count_alone_asks_nothing() -> None:
    facts = collect_simulated("healthy-8x-h100-sxm")
    gpus = list(facts.gpus)
    gpus[4] = dataclasses.replace(gpus[4], ecc_aggregate_uncorrected=3)
    result = _judged(dataclasses.replace(facts, gpus=tuple(gpus)))
    (lifetime,) = [f for f in result.findings if f.check == "errors.ecc_uncorrected_aggregate"
                   and f.severity is Severity.WARN]  # fmt: skip
    assert lifetime.gpu_index == 4
    assert lifetime.action is Action.NONE  # it never clears: no rerun, no reset changes it


def test_a_failed_reading_is_transient_and_run_it_again() -> None:
    facts = collect_simulated("healthy-8x-h100-sxm")
    from validator.model import Reason, Unavailable

    gpus = list(facts.gpus)
    gpus[2] = dataclasses.replace(
        gpus[2], ecc_mode_current=Unavailable(Reason.ERROR, "NVML_ERROR_UNKNOWN")
    )
    result = _judged(dataclasses.replace(facts, gpus=tuple(gpus)))
    (mode,) = [f for f in result.findings if f.check == "memory.ecc_mode" and f.gpu_index == 2]
    assert mode.severity is Severity.UNKNOWN
    assert mode.action is Action.RERUN
    assert is_transient(mode)


def test_transient_checks_have_a_rerun_row() -> None:
    from validator.judge.actions import RULES

    for check in TRANSIENT_CHECKS:
        rule = RULES[check]
        assert Action.RERUN in (rule.unknown, rule.warn, rule.fail), check


def test_a_live_burn_without_a_backend_is_advised_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The live source's own words, as the advice reads them (a node module the judge
    # cannot import): numpy missing on a host whose GPUs cannot run a CUDA backend either.
    from validator.node.burnin import backend_choice
    from validator.node.burnin.backend import BackendUnavailable
    from validator.node.burnin.devices import ORDER_VARIABLE
    from validator.node.live.live_source import LiveSource
    from validator.node.sim.scenario import load_scenario

    def unavailable(name: str | None, dtype: object) -> object:
        raise BackendUnavailable("numpy: No module named 'numpy'")

    monkeypatch.setattr(backend_choice, "select_backend", unavailable)
    monkeypatch.setenv(ORDER_VARIABLE, "FASTEST_FIRST")  # put back after the source sets it
    facts = collect_simulated("healthy-8x-h100-sxm")
    source = LiveSource(load_scenario("healthy-8x-h100-sxm").system())
    burn = source.burn(facts, BurnConfig(duration_s=1.0, backend="numpy"), None)
    assert burn.error is not None
    result = _judged(dataclasses.replace(facts, burn=burn))
    (finding,) = [f for f in result.findings if f.check == "burn.run"]
    assert finding.action is Action.FIX_SOFTWARE, finding
    assert "No module named 'numpy'" in finding.message


def test_dcgm_not_run_at_the_level_asked_is_measured_and_a_failed_run_is_rerun() -> None:
    from validator.model import DcgmDiag, Reason, Unavailable

    policy = dataclasses.replace(Policy(), dcgm_level=2)
    facts = collect_simulated("healthy-8x-h100-sxm")
    never = judge_node(dataclasses.replace(facts, dcgm=None), policy)
    (run,) = [f for f in never.findings if f.check == "dcgm.run"]
    assert (run.action, run.action_source) == (Action.MEASURE, DCGM_AT_LEVEL)
    failed = DcgmDiag(
        source="dcgmi", level=2, results=Unavailable(Reason.ERROR, "dcgmi timed out after 900 s")
    )
    timed_out = judge_node(dataclasses.replace(facts, dcgm=failed), policy)
    (run,) = [f for f in timed_out.findings if f.check == "dcgm.run"]
    assert run.action is Action.RERUN
    assert is_transient(run)


def test_a_capture_without_the_hcas_names_the_sysfs_record_first_and_ibstat_after(
    tmp_path: Path, captures_dir: Path
) -> None:
    (tmp_path / "nvidia-smi.txt").write_text(
        (captures_dir / "nvidia-smi-banner" / "gls-H100SXMx8-565.57.01.txt").read_text()
    )
    result = _judged(collect_capture(tmp_path))
    (ports,) = [f for f in result.findings if f.check == "network.ports"]
    assert ports.action is Action.MEASURE
    advice = ports.message[ports.message.index("; capture ") :]
    # The family reads /sys/class/infiniband first: its record is the file to capture,
    # and gpuready capture is what makes it (no one-line shell command does).
    sysfs = advice.index("capture infiniband-sysfs.txt on the host with `gpuready capture DIR`")
    fallback = advice.index("else ibstat.txt: ibstat > ibstat.txt")
    assert sysfs < fallback
    assert "/sys/class/infiniband" in advice
    source = ports.action_source
    assert source.startswith("gpuready: the capture lacks it: capture it on the host: ")
    assert source.index("gpuready capture DIR") < source.index("ibstat > ibstat.txt")
