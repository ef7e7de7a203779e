"""A fleet at a glance (issue 33): a line per node, details for the uncertified, a summary.

The terminal report of 1,000 nodes is counted line by line, through the CLI as the user
types it (``certify -i``, with and without ``--quiet``); a real simulated fleet shows no
burn table for a certified node; and the live view, in a real terminal (``script``),
shows each host's phase, time left and worst checks, and stays bounded at 1,000 hosts.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tests.report.test_one_count import run_in_terminal
from tests.report.test_report_samples import fleet_report
from validator.cli import certify as cli_certify
from validator.cli.main import main
from validator.cli.progress import SHOWN_FAILED, SHOWN_RUNNING, FleetProgress
from validator.model import HostSpec, Report, Verdict
from validator.report import shared
from validator.report.terminal import render_text
from validator.service.certify_service import CertifyOutcome

HOSTS = 1000
FAILING = tuple(range(7, HOSTS, 97))  # 11 nodes not certified, spread through the fleet
UNKNOWN = (3, 500, 998)


def _inventory(path: Path, hosts: dict[str, str]) -> Path:
    lines = ["[gpu]"] + [
        f"{name} gpuready_transport=local gpuready_simulate={scenario}"
        for name, scenario in hosts.items()
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _certify(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    report: Report,
    *extra: str,
) -> tuple[int, list[str]]:
    """``gpuready certify -i hosts.ini ...`` whose run gives ``report``: its exit and stdout."""
    monkeypatch.setattr(
        cli_certify, "run_with_display", lambda *_, **__: CertifyOutcome(report=report, run_id=1)
    )
    inventory = _inventory(tmp_path / "hosts.ini", {"n1": "healthy-8x-h100-sxm"})
    argv = ["certify", "-i", str(inventory), "--burn", "0", "--db", str(tmp_path / "h.db")]
    code = main([*argv, *extra])
    return code, capsys.readouterr().out.splitlines()


def _details(report: Report) -> int:
    """How many lines the details of the nodes not certified take, rendered alone."""
    total = 0
    for node in report.nodes:
        if node.verdict is not Verdict.CERTIFIED:
            alone = dataclasses.replace(report, nodes=(node,), fleet=None)
            total += len(render_text(alone).splitlines())
    return total


def test_a_1000_node_fleet_is_a_line_per_node_and_details_only_for_the_uncertified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    report = fleet_report(HOSTS, failing=FAILING, unknown=UNKNOWN)
    code, lines = _certify(tmp_path, monkeypatch, capsys, report)
    assert code == 1
    act_on = len(FAILING) + len(UNKNOWN)
    # A line per node; the details of the 14 not certified (as alone, but for the "via"
    # header); the summary: fleet line, a line per SKU, "act on", a line each, overall.
    summary = 1 + 1 + 1 + act_on + 1
    blank = act_on + 1  # between the node lines, each node's details and the summary
    assert len(lines) == HOSTS + _details(report) + summary + blank
    assert len(lines) < HOSTS + 20 * act_on  # nowhere near a block per node
    # Every node in exactly one line of the first block; a certified node nowhere else.
    node_lines = lines[:HOSTS]
    assert sorted(line.split()[0] for line in node_lines) == sorted(
        node.hostname for node in report.nodes
    )
    certified = {n.hostname for n in report.nodes if n.verdict is Verdict.CERTIFIED}
    mentions = [word for line in lines for word in line.split() if word in certified]
    assert len(mentions) == len(certified)
    assert report.fleet is not None
    assert lines[-summary] == shared.fleet_line(report.fleet)
    assert lines[-summary].endswith("986 certified, 11 not certified, 3 unknown")
    assert lines[-summary + 2] == f"act on {act_on} nodes:"
    assert lines[-1].startswith("Overall: NOT_CERTIFIED  986 of 1000 nodes certified")


def test_quiet_prints_the_summary_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    report = fleet_report(HOSTS, failing=FAILING, unknown=UNKNOWN)
    code, lines = _certify(tmp_path, monkeypatch, capsys, report, "--quiet")
    assert code == 1
    act_on = len(FAILING) + len(UNKNOWN)
    assert len(lines) == 1 + 1 + 1 + act_on + 1
    assert lines[0].startswith("fleet: ")
    # The nodes to act on, not certified first, then those not judged.
    assert [line.split()[0] for line in lines[3:-1]] == [
        node.hostname
        for verdict in (Verdict.NOT_CERTIFIED, Verdict.UNKNOWN)
        for node in report.nodes
        if node.verdict is verdict
    ]


def test_quiet_single_node_is_its_verdict_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["certify", "--simulate", "one-gpu-power-capped", "--burn", "1s", "-q"])
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == (
        "h100-node-01  NOT_CERTIFIED  h100-sxm  8 GPUs  burn.speed (GPU 3), "
        "burn.speed_relative (GPU 3), power.limit (GPU 3)  -> fix the software stack\n"
    )
    assert "burn " not in captured.err  # no plain progress lines either


def test_a_real_fleet_shows_no_burn_table_for_a_certified_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hosts = {f"ok{i}": "healthy-8x-h100-sxm" for i in range(4)}
    hosts["capped"] = "one-gpu-power-capped"
    inventory = _inventory(tmp_path / "hosts.ini", hosts)
    code = main(["certify", "-i", str(inventory), "--burn", "1s", "--db", str(tmp_path / "h.db")])
    out = capsys.readouterr().out
    assert code == 1
    blocks = out.rstrip("\n").split("\n\n")
    assert len(blocks) == 3  # node lines, the one node's details, the summary
    assert len(blocks[0].splitlines()) == 5
    assert blocks[1].startswith("capped  NOT_CERTIFIED  h100-sxm  8 GPUs  via local")
    assert len([line for line in out.splitlines() if line.startswith("  burn gpu")]) == 8
    assert blocks[2].splitlines()[-2:] == [
        "  capped  fix the software stack: GPU 3",
        "Overall: NOT_CERTIFIED  4 of 5 nodes certified; 1 to act on (above)",
    ]


def test_time_left_comes_from_the_burn_then_the_deadline() -> None:
    now = [100.0]
    display = FleetProgress(burn_s=300.0, deadline_s=420.0, clock=lambda: now[0])
    display.set_hosts([HostSpec(name="a", address="a")])
    display.phase("a", "connect")
    host = display.hosts["a"]
    assert display.time_left(host, 110.0) == "6:50 left"  # to the deadline, before the run
    display.phase("a", "run")  # at 100 s
    assert display.time_left(host, 142.0) == "burn 4:18 left"
    assert display.time_left(host, 450.0) == "1:10 left"  # the burn is over: the deadline
    assert display.time_left(host, 600.0) == "past its deadline"
    without = FleetProgress(burn_s=60.0, clock=lambda: now[0])
    without.phase("b", "run")
    assert without.time_left(without.hosts["b"], 200.0) == "finishing"


# 1,000 hosts in the live view: 400 running, 300 done (some not certified), the rest waiting.
LIVE_1000 = """
import time
from tests.report.test_report_samples import failing_node, healthy_node
from validator.cli.progress import FleetProgress
from validator.model import HostSpec

names = [f"gpu{i:04d}" for i in range(1000)]
with FleetProgress(burn_s=300.0) as display:
    assert display.interactive, "not a terminal"
    display.set_hosts([HostSpec(name=name, address=name) for name in names])
    for name in names[:700]:
        display.phase(name, "connect")
        display.phase(name, "run")
    for i, name in enumerate(names[:300]):
        display.result(failing_node(name) if i % 10 == 0 else healthy_node(name))
    display.refresh()
    time.sleep(0.8)
    lines = display.console.render_lines(display._render(), pad=False)
# The last frame, as drawn: between markers, once the live view has gone.
print("FRAME-START")
print("\\n".join("".join(segment.text for segment in line) for line in lines))
print(f"FRAME-END ROWS={len(lines)}")
"""


def test_the_live_view_of_1000_hosts_stays_bounded_in_a_real_terminal(tmp_path: Path) -> None:
    drawn = run_in_terminal(LIVE_1000, [], tmp_path)
    rows = re.search(r"FRAME-END ROWS=(\d+)", drawn)
    assert rows is not None, drawn[-2000:]
    frame = drawn[drawn.rindex("FRAME-START") : rows.start()]
    # A count line, the running hosts shown and a line for the rest, the latest not
    # certified and a line for the rest: never a row per host.
    assert int(rows.group(1)) <= 1 + SHOWN_RUNNING + 1 + SHOWN_FAILED + 1 + 1
    assert "300/1000 hosts" in drawn
    assert "400 running, 300 waiting" in drawn
    assert f"... and {400 - SHOWN_RUNNING} more running" in drawn
    assert f"... and {30 - SHOWN_FAILED} more not certified" in drawn
    # The last frame names no more hosts than that (the ones before it, while hosts were
    # arriving, named others).
    assert len(set(re.findall(r"gpu\d{4}", frame))) == SHOWN_RUNNING + SHOWN_FAILED
    # Each running host: its phase and the burn's time left; each one not certified:
    # its failed checks, counted, and what to do.
    assert re.search(r"gpu0300\s+run\s+burn 4:[45]\d left", drawn), drawn[-3000:]
    assert re.search(r"gpu0290\s+NOT_CERTIFIED\s+2 checks failed: memory.remap \(GPU 1\)", drawn)


def test_the_live_view_of_a_real_fleet_run(tmp_path: Path) -> None:
    """``gpuready certify -i`` in a terminal: phases, the burn's time left, the worst GPU."""
    hosts = {f"ok{i}": "healthy-8x-h100-sxm" for i in range(3)}
    hosts["capped"] = "one-gpu-power-capped"
    inventory = _inventory(tmp_path / "hosts.ini", hosts)
    argv = ["certify", "-i", str(inventory), "--burn", "3s", "--db", str(tmp_path / "h.db")]
    # The exit code printed, not returned: script(1) passes a failing one on as its own.
    program = f"from validator.cli.main import main\nprint('EXIT', main({argv!r}))\n"
    drawn = run_in_terminal(program, [], tmp_path)
    assert "EXIT 1" in drawn
    assert re.search(r"ok\d\s+run\s+burn 0:0[0-3] left", drawn), drawn[-3000:]
    # While it burns, a host's row names its worst GPU so far: the capped one's GPU 3.
    assert re.search(r"capped\s+run\s+burn 0:0[0-3] left\s+worst GPU 3: \d+ TFLOPS", drawn)
    assert re.search(r"capped\s+NOT_CERTIFIED\s+3 checks failed: burn.speed \(GPU 3\)", drawn)
    assert "slowest GPU so far: capped GPU 3" in drawn
    # And after the live view, the report: a line per node, then the summary.
    assert "Overall: NOT_CERTIFIED  3 of 4 nodes certified; 1 to act on (above)" in drawn
