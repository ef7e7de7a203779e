"""One counting unit: every output counts a report's checks the same way (issue 33).

One report, with checks that failed on several GPUs each (GPUs 3 and 5 capped at 500 W:
burn.speed, burn.speed_relative and power.limit each fail twice) and a node with checks
that could not be judged, goes through every output: the terminal (its count lines, its
FAIL lines, the node lines and the judge's summary beside them), the plain progress
lines, the live view in a real terminal (``script``), the HTML report (parsed with
html.parser), the JSON summary and the history's rows. Each says the same numbers,
and the numbers are the test's own count: each check once, at its worst finding.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.collecting import collect_simulated
from validator.judge.policy import Policy
from validator.judge.verdict import judge_node
from validator.model import FleetSummary, NodeResult, Report, Severity, Verdict
from validator.node.burnin.burn_config import BurnConfig
from validator.report.html import render_html
from validator.report.json_report import render_json, render_summary_json
from validator.report.terminal import render_text
from validator.store import Store

REPO = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]")

# GPUs 3 and 5 both capped: three checks fail, each on two GPUs.
TWO_CAPPED = {
    "name": "two-gpus-capped",
    "extends": "one-gpu-power-capped",
    "description": "GPUs 3 and 5 capped at 500 W.",
    "nvml": {"gpu_overrides": {"5": {"power_limit_enforced_w": 500}}},
    "burn": {
        "gpu_overrides": {"5": {"tflops": 610.0, "power_fraction": 0.99, "sm_clock_mhz": 1590}}
    },
}


def expected(node: NodeResult) -> dict[str, int]:
    """The test's own count: each check once, at the worst severity of its findings."""
    rank = [Severity.FAIL, Severity.UNKNOWN, Severity.WARN, Severity.PASS]
    worst: dict[str, Severity] = {}
    for finding in node.findings:
        if finding.check not in worst or rank.index(finding.severity) < rank.index(
            worst[finding.check]
        ):
            worst[finding.check] = finding.severity
    values = list(worst.values())
    return {
        "passed": values.count(Severity.PASS),
        "warnings": values.count(Severity.WARN),
        "failed": values.count(Severity.FAIL),
        "unknown": values.count(Severity.UNKNOWN),
    }


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    folder = tmp_path_factory.mktemp("scenario")
    scenario = folder / "two-gpus-capped.json"
    scenario.write_text(json.dumps(TWO_CAPPED))
    burn = BurnConfig(duration_s=1.0)
    capped = judge_node(collect_simulated(str(scenario), burn=burn), Policy())
    mismatch = judge_node(collect_simulated("driver-mismatch", burn=burn), Policy())
    healthy = judge_node(collect_simulated("healthy-8x-h100-sxm", burn=burn), Policy())
    nodes = (
        dataclasses.replace(capped, hostname="capped", transport="local"),
        dataclasses.replace(mismatch, hostname="mismatch", transport="local"),
        dataclasses.replace(healthy, hostname="healthy", transport="local"),
    )
    return Report(
        generated_at="2026-01-01T00:00:00Z",
        tool_version="0.1.0",
        nodes=nodes,
        fleet=FleetSummary(hosts=3, certified=1, not_certified=2, unknown=0, skus=()),
    )


def test_the_scenario_has_checks_failing_on_several_gpus(report: Report) -> None:
    capped = report.nodes[0]
    fails = [f for f in capped.findings if f.severity is Severity.FAIL]
    assert len(fails) == 6
    assert expected(capped)["failed"] == 3  # each of the three failed on GPUs 3 and 5
    assert expected(report.nodes[1])["unknown"] >= 2
    assert [node.verdict for node in report.nodes] == [
        Verdict.NOT_CERTIFIED,
        Verdict.NOT_CERTIFIED,
        Verdict.CERTIFIED,
    ]


def _terminal_counts(text: str) -> dict[str, dict[str, int]]:
    """Each node's count line in a fleet's details: ``N checks: p passed, ...``."""
    counts = {}
    for block in text.split("\n\n"):
        head = block.splitlines()[0]
        found = re.search(
            r"^  (\d+) checks?: (\d+) passed, (\d+) warnings?, (\d+) failed, (\d+) unknown$",
            block,
            re.MULTILINE,
        )
        if found and "  via " in head:
            total, passed, warnings, failed, unknown = (int(g) for g in found.groups())
            assert total == passed + warnings + failed + unknown
            counts[head.split()[0]] = {
                "passed": passed,
                "warnings": warnings,
                "failed": failed,
                "unknown": unknown,
            }
    return counts


def test_the_terminal_counts_checks_everywhere(report: Report) -> None:
    text = render_text(report)
    counts = _terminal_counts(text)
    for node in report.nodes:
        if node.verdict is not Verdict.CERTIFIED:
            assert counts[node.hostname] == expected(node), node.hostname
    capped = report.nodes[0]
    want = expected(capped)["failed"]
    # The judge's summary beside the count line says the same number.
    assert f"{want} checks failed:" in (capped.summary or "")
    # The FAIL lines: six, of three checks, which is what "3 failed" counts.
    details = next(
        b for b in text.split("\n\n") if b.startswith("capped ") and "  via " in b.split("\n")[0]
    )
    fail_checks = {line.split()[1] for line in details.splitlines() if line.startswith("  FAIL")}
    assert len(fail_checks) == want
    # The node's own line names the same checks, each once with both GPUs.
    line = next(line for line in text.splitlines() if line.startswith("capped "))
    more = re.search(r", \+(\d+) more", line)
    assert line.count("(GPUs 3, 5)") + (int(more.group(1)) if more else 0) == want
    assert line.count("(GPUs 3, 5)") == want  # and here all fit


def test_the_progress_line_counts_checks(
    report: Report, capsys: pytest.CaptureFixture[str]
) -> None:
    from validator.cli.progress import FleetProgress

    display = FleetProgress()
    assert not display.interactive  # pytest's stderr: plain lines
    display.set_hosts([])
    for node in report.nodes:
        display.result(node)
    lines = capsys.readouterr().err.splitlines()
    for node in report.nodes:
        (line,) = [line for line in lines if f"] {node.hostname} " in line]
        count = expected(node)
        if node.verdict is Verdict.CERTIFIED:
            assert "checks" not in line
        elif count["failed"]:
            word = "check" if count["failed"] == 1 else "checks"
            assert f"  {count['failed']} {word} failed: " in line
        else:
            assert f"  {count['unknown']} checks could not be judged: " in line


class _Tallies(HTMLParser):
    """The pills of every ``<div class="tally" data-unit="checks">``, by the section holding it."""

    def __init__(self) -> None:
        super().__init__()
        self.section = ""
        self.depth = 0  # inside a tally div: its nesting
        self.pill: str | None = None
        self.key = ""
        self.tallies: dict[str, dict[str, int]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "section" and found.get("data-hostname"):
            self.section = found["data-hostname"] or ""
        if tag == "div" and found.get("data-unit") == "checks":
            self.depth = 1
            self.key = "totals" if found.get("id") == "totals" else self.section
            self.tallies[self.key] = {}
        elif tag == "div" and self.depth:
            self.depth += 1
        if tag == "span" and self.depth and "pill" in (found.get("class") or ""):
            self.pill = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "span" and self.pill is not None:
            number, word = self.pill.split()[:2]
            name = {"warning": "warnings"}.get(word, word)
            self.tallies[self.key][name] = int(number)
            self.pill = None
        if tag == "div" and self.depth:
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.pill is not None:
            self.pill += data


def test_the_html_report_counts_checks(report: Report) -> None:
    parser = _Tallies()
    parser.feed(render_html(report))
    for node in report.nodes:
        if node.verdict is not Verdict.CERTIFIED:  # certified: a compact section, no tally
            assert parser.tallies[node.hostname] == expected(node), node.hostname
    totals = {
        key: sum(expected(node)[key] for node in report.nodes)
        for key in ("passed", "warnings", "failed", "unknown")
    }
    assert parser.tallies["totals"] == totals


def test_the_json_summary_counts_checks(report: Report) -> None:
    document = json.loads(render_summary_json(report))
    for entry, node in zip(document["nodes"], sorted(report.nodes, key=_reading)):
        assert entry["hostname"] == node.hostname
        assert entry["counts"] == expected(node)
    full = json.loads(render_json(report))  # the full form has every finding to count
    assert len(full["nodes"][0]["findings"]) > sum(expected(report.nodes[0]).values())


def _reading(node: NodeResult) -> int:
    return {Verdict.NOT_CERTIFIED: 0, Verdict.UNKNOWN: 1, Verdict.CERTIFIED: 2}[node.verdict]


def test_history_counts_checks(report: Report, tmp_path: Path) -> None:
    with Store.open(tmp_path / "h.db") as store:
        run = store.start_run("certify", len(report.nodes), "p")
        store.record_results(run, [(node, None) for node in report.nodes])
        store.finish_run(run)
        rows = {row.hostname: row for row in store.history()}
    for node in report.nodes:
        count = expected(node)
        assert (rows[node.hostname].failed, rows[node.hostname].unknown) == (
            count["failed"],
            count["unknown"],
        )


# The live view in a real terminal: a pseudo-terminal from util-linux's script(1).
LIVE_SCRIPT = """
import sys, time
from validator.cli.progress import FleetProgress
from validator.model import HostSpec
from validator.report.json_report import load_report_json

report = load_report_json(open(sys.argv[1], encoding="utf-8").read())
with FleetProgress() as display:
    assert display.interactive, "not a terminal"
    display.set_hosts([HostSpec(name=n.hostname, address=n.hostname) for n in report.nodes])
    for node in report.nodes:
        display.phase(node.hostname, "run")
        display.result(node)
    display.refresh()
    time.sleep(0.6)
"""


def run_in_terminal(script: str, args: list[str], tmp_path: Path) -> str:
    """Run ``script`` (Python) with stdout and stderr on a pseudo-terminal; what it drew."""
    if shutil.which("script") is None:
        pytest.skip("script(1) (util-linux) is not installed")
    program = tmp_path / "live.py"
    program.write_text(script)
    typescript = tmp_path / "typescript"
    command = " ".join([sys.executable, str(program), *args])
    env = {**os.environ, "PYTHONPATH": str(REPO), "TERM": "xterm-256color", "COLUMNS": "160"}
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE"):
        env.pop(name, None)
    done = subprocess.run(
        ["script", "-qec", command, str(typescript)],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout.decode(errors="replace")[-2000:]
    return ANSI.sub("", typescript.read_bytes().decode("utf-8", "replace"))


def test_the_live_view_counts_checks_in_a_real_terminal(report: Report, tmp_path: Path) -> None:
    saved = tmp_path / "report.json"
    saved.write_text(render_json(report))
    drawn = run_in_terminal(LIVE_SCRIPT, [str(saved)], tmp_path)
    lines = [line.strip() for line in re.split(r"[\r\n]+", drawn) if line.strip()]
    for node in report.nodes:
        count = expected(node)
        rows = [line for line in lines if line.startswith(f"{node.hostname} ")]
        if node.verdict is Verdict.CERTIFIED:
            assert not rows  # only the hosts not certified are listed once done
            continue
        assert rows, drawn[-3000:]
        if count["failed"]:
            word = "check" if count["failed"] == 1 else "checks"
            assert f"{count['failed']} {word} failed: " in rows[-1]
        else:
            assert f"{count['unknown']} checks could not be judged: " in rows[-1]


def test_a_certified_summary_counts_what_could_not_be_judged() -> None:
    """An A100 node certified with an optional check unknown on every GPU: not "all passed"."""
    burn = BurnConfig(duration_s=1.0)
    node = judge_node(collect_simulated("healthy-8x-a100-80gb", burn=burn), Policy())
    count = expected(node)
    assert node.verdict is Verdict.CERTIFIED
    assert count["unknown"] == 1
    text = render_text(Report(generated_at="", tool_version="", nodes=(node,)))
    total = sum(count.values())
    assert f"  {total} checks: {count['passed']} passed, 0 warnings, 0 failed, 1 unknown\n" in text
    assert f"{count['passed']} of {total} checks passed, 1 optional could not be judged: " in (
        node.summary or ""
    )
    assert "all " not in (node.summary or "")
