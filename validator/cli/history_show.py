"""``gpuready history show RUN [HOST]``: one past run's findings and figures, from history.

Per node: its verdict and summary, each finding that did not pass (its GPU and what to
do), and the figures an operator compares runs by: per GPU the burn-in's TFLOPS, peak
power and temperature and its copy bandwidths, and the node's peer and all-reduce
bandwidth. A run that ran the stage across nodes (``certify --cross-node``) also shows
it: its summary, the nodes and links it named and why, and each pair or group test with
its figure, floor and verdict. Every text that came from a node is escaped (one line, no
controls). ``--json`` gives the same for machines.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

import click

from validator.cli.options import TEXT, db_option
from validator.error_tree import BadInputError
from validator.fields import excerpt
from validator.model import (
    AllReduce,
    CrossNodeStage,
    CrossNodeTest,
    Finding,
    Measured,
    NodeResult,
    Severity,
    Unavailable,
    measured_gb_s,
    to_dict,
)
from validator.safe_text import one_line
from validator.store import NoHistoryError, RunInfo, Store

_NUMBER = re.compile(r"[0-9]{1,18}")
# Hosts named in a "not in run" line, at most: a run of a thousand nodes is listed elsewhere.
_HOSTS_NAMED = 10
# Tests across nodes listed in the text, at most (those that did not pass first); --json has all.
_TESTS_LISTED = 40


def parse_run(text: object) -> int:
    """RUN: a run number as ``gpuready history`` lists it.

    Raises:
        BadInputError: anything else, as one line.
    """
    value = str(text).strip()
    if _NUMBER.fullmatch(value) and int(value) > 0:
        return int(value)
    raise BadInputError(
        f"RUN {excerpt(str(text))} is not a run number: `gpuready history` lists runs "
        "(the RUN column)"
    )


def _value(measured: Measured[float] | Measured[int]) -> float | None:
    """A figure where it was measured; None where it was not (never a made-up zero)."""
    if isinstance(measured, (Unavailable, bool)):
        return None
    return float(measured)


def gpu_figures(result: NodeResult) -> list[dict[str, object]]:
    """Per GPU: burn TFLOPS, peak power and temperature, copy bandwidths (GB/s).

    Peak power is also given as a share of the GPU's enforced limit; H2D, D2H and HBM
    are the copy medians. None stands for what was not measured.
    """
    from validator.report.shared import burn_stats

    facts = result.facts
    rows: dict[int, dict[str, object]] = {}
    for gpu in facts.gpus:
        rows[gpu.index] = {"gpu": gpu.index}
    if facts.burn is not None:
        for burn in facts.burn.gpus:
            stats = burn_stats(burn, facts)
            rows.setdefault(burn.index, {"gpu": burn.index}).update(
                burn_tflops=_value(burn.tflops),
                peak_power_w=_value(stats.peak_power_w),
                peak_power_pct=_value(stats.peak_power_pct),
                peak_temperature_c=_value(stats.peak_temperature_c),
            )
    copies = facts.interconnect.gpus if facts.interconnect is not None else ()
    if isinstance(copies, tuple):  # else why they were not measured: no figures
        for copy in copies:
            rows.setdefault(copy.index, {"gpu": copy.index}).update(
                h2d_gb_s=measured_gb_s(copy.h2d),
                d2h_gb_s=measured_gb_s(copy.d2h),
                hbm_gb_s=measured_gb_s(copy.hbm),
            )
    return [rows[index] for index in sorted(rows)]


def node_figures(result: NodeResult) -> dict[str, object]:
    """The node's interconnect: slowest peer copy and all-reduce busbw at its largest size."""
    from validator.report.shared import largest_point, slowest_pair

    interconnect = result.facts.interconnect
    if interconnect is None:
        return {}
    figures: dict[str, object] = {"interconnect_error": interconnect.error}
    peers = interconnect.peers
    pair = slowest_pair(peers) if isinstance(peers, tuple) else None
    if pair is not None:
        figures["slowest_peer"] = {
            "src": pair.src,
            "dst": pair.dst,
            "gb_s": measured_gb_s(pair.unidirectional),
        }
    reduce = interconnect.all_reduce
    points = reduce.points if isinstance(reduce, AllReduce) else ()
    point = largest_point(points) if isinstance(points, tuple) else None
    if point is not None and isinstance(reduce, AllReduce):
        figures["all_reduce"] = {
            "size_bytes": point.size_bytes,
            "busbw_gb_s": point.busbw_gb_s,
            "ranks": reduce.ranks,
        }
    return figures


def _finding(finding: Finding) -> dict[str, object]:
    return {
        "check": one_line(finding.check),
        "severity": finding.severity.value,
        "gpu": finding.gpu_index,
        "message": one_line(finding.message),
        "action": finding.action.value,
        "required": finding.required,
    }


def _not_passed(result: NodeResult) -> list[Finding]:
    from validator.report.shared import sorted_findings

    return [f for f in sorted_findings(result.findings) if f.severity is not Severity.PASS]


def node_json(result: NodeResult) -> dict[str, object]:
    """One node of a run, as ``--json`` gives it: every text escaped."""
    return {
        "hostname": one_line(result.hostname),
        "verdict": result.verdict.value,
        "sku": one_line(result.sku) if result.sku else None,
        "summary": one_line(result.summary),
        "source": one_line(result.facts.source),
        "findings": [_finding(f) for f in _not_passed(result)],
        "gpus": gpu_figures(result),
        "interconnect": node_figures(result),
    }


def _escaped(value: object) -> object:
    """Every text in a JSON value escaped to one line, the rest as it was."""
    if isinstance(value, str):
        return one_line(value)
    if isinstance(value, list):
        return [_escaped(item) for item in value]
    if isinstance(value, dict):
        return {one_line(key): _escaped(item) for key, item in value.items()}
    return value


def _test_verdict(test: CrossNodeTest) -> str:
    """PASS, FAIL, or UNKNOWN where the test gave no figure (never a pass)."""
    if test.figure is None:
        return "UNKNOWN"
    return "PASS" if test.passed else "FAIL"


def stage_json(stage: CrossNodeStage) -> dict[str, object]:
    """The stage across nodes as ``--json`` gives it: every field, each test's verdict."""
    data = _escaped(to_dict(stage))
    assert isinstance(data, dict)  # noqa: S101 - a dataclass encodes as an object
    for test, encoded in zip(stage.tests, data.get("tests", [])):
        encoded["verdict"] = _test_verdict(test)
    return data


def run_json(
    run: RunInfo, results: Sequence[NodeResult], stage: CrossNodeStage | None = None
) -> str:
    """The run and its nodes as JSON text; ``cross_node`` only where the run ran that stage."""
    data: dict[str, object] = {
        "run": run.run_id,
        "kind": run.kind,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "status": run.status,
        "nodes": [node_json(result) for result in results],
    }
    if stage is not None:
        data["cross_node"] = stage_json(stage)
    return json.dumps(data, indent=2) + "\n"


def _test_line(test: CrossNodeTest) -> str:
    hosts = "-".join(one_line(host, 80) for host in test.hosts)
    if test.figure is None:
        figure = "no result" + (f" ({one_line(test.detail, 160)})" if test.detail else "")
    else:
        figure = f"{test.figure:,.1f} {test.unit}"
    return (
        f"    round {test.round}  {test.kind}  {hosts}  {figure}  floor {test.floor:,.1f}  "
        f"{_test_verdict(test)}  ({one_line(test.purpose, 20)})"
    )


def stage_text(stage: CrossNodeStage) -> list[str]:
    """The stage's summary lines, then its tests (those that did not pass first), bounded."""
    from validator.report.fabric_text import stage_lines

    ordered = sorted(stage.tests, key=lambda test: _test_verdict(test) == "PASS")
    lines = [*stage_lines(stage), f"  tests: {len(stage.tests)}"]
    lines += [_test_line(test) for test in ordered[:_TESTS_LISTED]]
    if len(ordered) > _TESTS_LISTED:
        lines.append(f"    ... and {len(ordered) - _TESTS_LISTED} more tests (--json)")
    return lines


def _cell(value: object, digits: int = 1) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


_FIGURE_COLUMNS = (
    ("GPU", "gpu", 0),
    ("TFLOPS", "burn_tflops", 1),
    ("PEAK_W", "peak_power_w", 0),
    ("PEAK_%", "peak_power_pct", 0),
    ("PEAK_C", "peak_temperature_c", 0),
    ("H2D_GB/s", "h2d_gb_s", 1),
    ("D2H_GB/s", "d2h_gb_s", 1),
    ("HBM_GB/s", "hbm_gb_s", 0),
)


def _figure_lines(result: NodeResult) -> list[str]:
    """The per-GPU figures as aligned columns; none when nothing was measured per GPU."""
    rows = [r for r in gpu_figures(result) if len(r) > 1]
    if not rows:
        return []
    table = [[name for name, _, _ in _FIGURE_COLUMNS]]
    table += [[_cell(row.get(key), digits) for _, key, digits in _FIGURE_COLUMNS] for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(_FIGURE_COLUMNS))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in table]


def _interconnect_line(result: NodeResult) -> list[str]:
    from validator.report.shared import interconnect_parts

    interconnect = result.facts.interconnect
    if interconnect is None:
        return []
    if interconnect.error:
        return [f"  interconnect could not be measured: {one_line(interconnect.error)}"]
    return ["  interconnect: " + one_line(", ".join(interconnect_parts(interconnect)))]


def node_text(result: NodeResult) -> list[str]:
    """One node's lines: header, summary, findings with GPU and action, figures."""
    from validator.report.shared import action_words

    sku = one_line(result.sku) if result.sku else "no SKU matched"
    lines = [
        f"{one_line(result.hostname)}  {result.verdict.value}  {sku}  "
        f"{len(result.facts.gpus)} GPUs  {one_line(result.facts.source)}",
        f"  {one_line(result.summary)}" if result.summary else "",
    ]
    for finding in _not_passed(result):
        gpu = "node" if finding.gpu_index is None else f"GPU {finding.gpu_index}"
        action = f"  -> {action_words(finding.action)}" if finding.action.value != "none" else ""
        lines.append(
            f"  {finding.severity.value:<7}  {one_line(finding.check)}  {gpu}  "
            f"{one_line(finding.message)}{action}"
        )
    lines += _figure_lines(result) + _interconnect_line(result)
    return [line for line in lines if line]


def run_text(
    run: RunInfo, results: Sequence[NodeResult], stage: CrossNodeStage | None = None
) -> str:
    """The run's head line, each node's lines, then the stage across nodes where it ran."""
    hosts = f"{len(run.hostnames)} host" + ("" if len(run.hostnames) == 1 else "s")
    # The run's own columns too: anyone who can write the file can write them.
    kind, started, status = (one_line(text, 80) for text in (run.kind, run.started_at, run.status))
    head = f"run {run.run_id}  {kind}  started {started}  {status}  {hosts}"
    blocks = ["\n".join(node_text(result)) for result in results]
    if stage is not None:
        blocks.append("\n".join(stage_text(stage)))
    return "\n\n".join([head, *blocks]) + "\n"


def _not_in_run(run: RunInfo, host: str) -> BadInputError:
    named = ", ".join(one_line(h, 80) for h in run.hostnames[:_HOSTS_NAMED])
    left = len(run.hostnames) - _HOSTS_NAMED
    more = f" and {left} more" if left > 0 else ""
    holds = f"it holds {named}{more}" if named else "it holds no host's result"
    return BadInputError(
        f"run {run.run_id} has no result of {one_line(host, 80)} ({holds}): "
        f"`gpuready history {one_line(host, 80)}` lists that host's runs"
    )


def read_run(
    db_path: str | None, run_id: int, host: str | None
) -> tuple[RunInfo, list[NodeResult], CrossNodeStage | None]:
    """The run, its results (HOST's alone when given) and its stage across nodes, if any.

    Raises:
        BadInputError: no such run, or no result of HOST in it (one line with the fix).
        StoreError: the database failed, or a stored result cannot be read.
    """
    try:
        store = Store.open(db_path, readonly=True)
    except NoHistoryError as exc:
        raise BadInputError(f"run {run_id} not found: {exc}") from None
    with store:
        run = store.run_info(run_id)
        if run is None:
            raise BadInputError(
                f"run {run_id} not found in {store.path}: `gpuready history` lists runs"
            )
        if host is not None and host not in run.hostnames:
            raise _not_in_run(run, host)
        names = [host] if host is not None else list(run.hostnames)
        results = [store.result(run_id, name) for name in names]
        stage = store.cross_node(run_id)
    return run, [result for result in results if result is not None], stage


@click.command("show")
@click.argument("run_number", metavar="RUN", type=TEXT)
@click.argument("host", required=False, type=TEXT)
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON on stdout.")
def show(run_number: str, host: str | None, db_path: str | None, as_json: bool) -> None:
    """Print run RUN's findings and figures, for every node or HOST.

    Per node: the verdict, each finding that did not pass with its GPU and action,
    and per GPU the burn-in TFLOPS, peak power and temperature and copy bandwidths.
    """
    run, results, stage = read_run(db_path, parse_run(run_number), host)
    text = run_json(run, results, stage) if as_json else run_text(run, results, stage)
    click.echo(text, nl=False)
