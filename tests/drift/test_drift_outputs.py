"""Drift outputs: the Prometheus textfile, the NHC line, and Slurm drain/resume via scontrol."""

from __future__ import annotations

import dataclasses
import datetime
import os
import stat
from collections.abc import Sequence
from pathlib import Path

import pytest
from prometheus_client import parser

from tests.drift.test_drift import POLICY, baseline, quick_facts, with_gpu
from validator.drift import drift_node, nhc_line, slurm_reason
from validator.error_tree import BadInputError, ReportError
from validator.model import DRIFT_CHECKS, NodeResult, Verdict
from validator.report.drift_text import render_drift_text
from validator.report.prometheus import render_prometheus, write_prometheus
from validator.slurm import (
    Action,
    CommandResult,
    SlurmError,
    drain,
    parse_show_node,
    resume_if_ours,
    run_scontrol,
)

NOW = datetime.datetime(2026, 1, 2, 8, 0, tzinfo=datetime.timezone.utc)


def as_host(result: NodeResult, name: str) -> NodeResult:
    return dataclasses.replace(result, hostname=name)


def clean() -> NodeResult:
    return drift_node(quick_facts(), baseline(), POLICY)


def capped() -> NodeResult:
    facts = with_gpu(quick_facts(), 5, power_limit_enforced_w=500.0)
    facts = with_gpu(facts, 6, power_limit_enforced_w=450.0)
    return drift_node(facts, baseline(), POLICY)


def never() -> NodeResult:
    return drift_node(quick_facts(), None, POLICY)


def fleet() -> list[NodeResult]:
    return [as_host(clean(), "gpu01"), as_host(capped(), "gpu02"), as_host(never(), "gpu03")]


# ------------------------------------------------------------------ Prometheus


def test_prometheus_file_parses_with_prometheus_client() -> None:
    text = render_prometheus(fleet(), now=NOW)
    families = {f.name: f for f in parser.text_string_to_metric_families(text)}
    assert set(families) == {
        "gpuready_drift_detected",
        "gpuready_drift_status",
        "gpuready_drift_findings",
        "gpuready_drift_last_run_timestamp_seconds",
        # Deprecated, kept one release for the dashboards written against them.
        "gpuready_certified",
        "gpuready_last_check_timestamp_seconds",
    }
    assert all(f.type == "gauge" for f in families.values())
    detected = {s.labels["host"]: s.value for s in families["gpuready_drift_detected"].samples}
    # Never certified: drift could not be told, so no sample (never a 0 that reads "as certified").
    assert detected == {"gpu01": 0.0, "gpu02": 1.0}
    certified = {s.labels["host"]: s.value for s in families["gpuready_certified"].samples}
    assert certified == {"gpu01": 1.0, "gpu02": 0.0, "gpu03": 0.0}
    status = {
        (s.labels["host"], s.labels["status"])
        for s in families["gpuready_drift_status"].samples
        if s.value == 1.0
    }
    assert status == {("gpu01", "ok"), ("gpu02", "drift"), ("gpu03", "never_certified")}
    findings = {
        (s.labels["host"], s.labels["check"]): s.value
        for s in families["gpuready_drift_findings"].samples
    }
    assert findings[("gpu02", "drift.power_limit")] == 2.0  # GPUs 5 and 6
    assert sum(v for (host, _), v in findings.items() if host == "gpu02") == 2.0
    assert sum(v for (host, _), v in findings.items() if host == "gpu01") == 0.0
    assert len(findings) == 3 * len(DRIFT_CHECKS)  # every check listed, zeros included
    for name in (
        "gpuready_drift_last_run_timestamp_seconds",
        "gpuready_last_check_timestamp_seconds",
    ):
        assert {s.value for s in families[name].samples} == {NOW.timestamp()}


def test_prometheus_label_values_are_escaped() -> None:
    odd = as_host(clean(), 'we"ird\\host')
    text = render_prometheus([odd], now=NOW)
    assert 'host="we\\"ird\\\\host"' in text
    family = next(
        f for f in parser.text_string_to_metric_families(text) if f.name == "gpuready_certified"
    )
    assert family.samples[0].labels["host"] == 'we"ird\\host'


def test_prometheus_text_lines_without_the_parser() -> None:
    text = render_prometheus([as_host(capped(), "gpu02")], now=NOW)
    lines = text.splitlines()
    # prometheus_client writes every value as a float, the way Go prints one, and the
    # labels of a sample in name order.
    assert 'gpuready_drift_detected{host="gpu02"} 1.0' in lines
    assert 'gpuready_drift_findings{check="drift.power_limit",host="gpu02"} 2.0' in lines
    assert 'gpuready_drift_findings{check="drift.driver",host="gpu02"} 0.0' in lines
    assert 'gpuready_drift_last_run_timestamp_seconds{host="gpu02"} 1.7673408e+09' in lines
    assert text.endswith("\n")
    assert "# TYPE gpuready_drift_detected gauge" in lines


def test_prometheus_help_texts_are_kept() -> None:
    helps = {
        line.split(" ", 3)[2]: line.split(" ", 3)[3]
        for line in render_prometheus(fleet(), now=NOW).splitlines()
        if line.startswith("# HELP ")
    }
    assert helps == {
        "gpuready_drift_detected": "1 when the node moved from its latest certificate, 0 when "
        "it is as certified; absent when that could not be told.",
        "gpuready_drift_status": "The node's drift state: ok, drift, unknown, never_certified "
        "or not_certified.",
        "gpuready_drift_findings": "Drift findings from the certificate, by check.",
        "gpuready_drift_last_run_timestamp_seconds": "When gpuready drift last checked the node.",
        "gpuready_certified": "Deprecated: use gpuready_drift_detected (inverted). 1 when the "
        "node matches its latest gpuready certificate.",
        "gpuready_last_check_timestamp_seconds": "Deprecated: use "
        "gpuready_drift_last_run_timestamp_seconds.",
    }


def test_prometheus_timestamp_keeps_milliseconds_and_naive_is_utc() -> None:
    moment = datetime.datetime(2026, 1, 2, 8, 0, 0, 123456)  # naive: UTC
    (family,) = [
        f
        for f in parser.text_string_to_metric_families(render_prometheus([clean()], now=moment))
        if f.name == "gpuready_drift_last_run_timestamp_seconds"
    ]
    assert family.samples[0].value == pytest.approx(NOW.timestamp() + 0.123, abs=1e-6)


def test_write_prometheus_replaces_the_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "gpuready.prom"
    target.write_text("old\n")
    write_prometheus(target, [capped()], now=NOW)
    assert target.read_text() == render_prometheus([capped()], now=NOW)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpuready.prom"]
    # node_exporter runs as its own user: the file must be readable by others.
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_write_prometheus_is_readable_by_others_under_a_strict_umask(tmp_path: Path) -> None:
    target = tmp_path / "gpuready.prom"
    old = os.umask(0o077)
    try:
        write_prometheus(target, [clean()], now=NOW)
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_write_prometheus_failure_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "gpuready.prom"
    target.write_text("old 1\n")

    def refuse(src: str, dst: str, **relative: int) -> None:
        raise OSError(28, "No space left on device")

    # prometheus_client renames the temporary file into place (os.rename on POSIX).
    monkeypatch.setattr(os, "replace", refuse)
    monkeypatch.setattr(os, "rename", refuse)
    with pytest.raises(ReportError, match=r"No space left on device$"):
        write_prometheus(target, [clean()], now=NOW)
    assert target.read_text() == "old 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpuready.prom"]


def test_write_prometheus_into_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ReportError) as info:
        write_prometheus(tmp_path / "absent" / "gpuready.prom", [clean()], now=NOW)
    assert str(info.value).startswith(f"cannot write the Prometheus file {tmp_path}/absent/")
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------ NHC and text


def test_nhc_line_for_each_state() -> None:
    assert nhc_line([clean()]) == (
        0,
        "gpuready: ok: no drift since the certificate of 2026-01-01T12:00:00+00:00",
    )
    code, line = nhc_line([capped()])
    assert code == 1
    assert line == (
        "gpuready: drift since the certificate of 2026-01-01T12:00:00+00:00: power_limit (GPU 5,6)"
    )
    # NHC reads any status but 0 as a failed check: a node never certified does not pass.
    assert nhc_line([never()]) == (
        1,
        "gpuready: never certified: run gpuready certify first",
    )


def test_nhc_line_for_a_fleet_names_the_hosts_and_stays_one_line() -> None:
    code, line = nhc_line(fleet())
    assert code == 1
    assert line.startswith("gpuready: gpu02: drift since")
    assert "gpu03: never certified" in line
    assert "gpu01" not in line
    many = [as_host(capped(), f"node-with-a-long-name-{i:03d}") for i in range(20)]
    code, line = nhc_line(many)
    assert "\n" not in line
    assert len(line) <= 240
    assert line.endswith("...")


def test_slurm_reason_is_prefixed() -> None:
    assert slurm_reason(capped()).startswith("gpuready: drift since the certificate of ")


def test_terminal_text() -> None:
    text = render_drift_text(fleet())
    lines = text.splitlines()
    assert (
        lines[0] == "gpu01  NO DRIFT  no drift since the certificate of 2026-01-01T12:00:00+00:00"
    )
    assert lines[1].startswith("gpu02  DRIFT  drift since")
    assert lines[2].split() == [
        "FAIL",
        "drift.power_limit",
        "gpu5",
        "GPU",
        "5:",
        "power",
        "limit",
        "lowered",
        "from",
        "700",
        "W",
        "to",
        "500",
        "W",
        "->",
        "fix",
        "the",
        "software",
        "stack",
    ]
    assert "gpu03  NEVER CERTIFIED  never certified: run gpuready certify first" in lines
    assert lines[-1] == (
        "3 hosts: 1 no drift, 1 drifted, 0 unknown, 1 never certified, 0 not certified"
    )


# ------------------------------------------------------------------ Slurm

SHOW_IDLE = """NodeName=gpu02 Arch=x86_64 CoresPerSocket=56
   CPUAlloc=0 CPUEfctv=224 CPUTot=224 CPULoad=0.35
   State=IDLE ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=gpu
"""


def show(state: str, reason: str | None) -> str:
    text = SHOW_IDLE.replace("State=IDLE", f"State={state}")
    if reason is not None:
        text += f"   Reason={reason} [root@2026-01-02T08:00:01]\n"
    return text


class FakeScontrol:
    """Answers ``scontrol show node`` with a given state; records every argument list."""

    def __init__(self, state: str = "IDLE", reason: str | None = None, rc: int = 0) -> None:
        self.state = state
        self.reason = reason
        self.rc = rc
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        self.calls.append(list(argv))
        if argv[:2] == ["scontrol", "show"]:
            return CommandResult(0, show(self.state, self.reason))
        if self.rc:
            return CommandResult(self.rc, "", "slurm_update error: Invalid node name specified")
        return CommandResult(0)

    def updates(self) -> list[list[str]]:
        return [call for call in self.calls if call[1] == "update"]


def test_drain_a_clean_node_with_the_reason_as_one_argument() -> None:
    fake = FakeScontrol()
    reason = slurm_reason(capped())
    assert drain("gpu02", reason, runner=fake) is Action.DRAINED
    assert fake.calls == [
        ["scontrol", "show", "node", "gpu02"],
        ["scontrol", "update", "NodeName=gpu02", "State=DRAIN", f"Reason={reason}"],
    ]


def test_drain_adds_the_prefix_when_missing() -> None:
    fake = FakeScontrol()
    drain("gpu02", "power limit lowered", runner=fake)
    assert fake.updates()[0][-1] == "Reason=gpuready: power limit lowered"


def test_drain_never_overwrites_someone_elses_reason() -> None:
    fake = FakeScontrol("IDLE+DRAIN", "replacing PSU, ticket 4711")
    assert drain("gpu02", "gpuready: drift", runner=fake) is Action.LEFT_ALONE
    assert fake.updates() == []


def test_drain_already_ours_updates_only_a_changed_reason() -> None:
    same = FakeScontrol("MIXED+DRAIN", "gpuready: drift: driver")
    assert drain("gpu02", "gpuready: drift: driver", runner=same) is Action.UNCHANGED
    assert same.updates() == []
    changed = FakeScontrol("MIXED+DRAIN", "gpuready: drift: driver")
    assert drain("gpu02", "gpuready: drift: power_limit", runner=changed) is Action.UPDATED
    assert changed.updates()[0][-1] == "Reason=gpuready: drift: power_limit"


def test_resume_only_nodes_gpuready_drained() -> None:
    ours = FakeScontrol("IDLE+DRAIN", "gpuready: drift: power_limit (GPU 5)")
    assert resume_if_ours("gpu02", runner=ours) is Action.RESUMED
    assert ours.updates() == [["scontrol", "update", "NodeName=gpu02", "State=RESUME"]]

    theirs = FakeScontrol("IDLE+DRAIN", "bad DIMM")
    assert resume_if_ours("gpu02", runner=theirs) is Action.LEFT_ALONE
    assert theirs.updates() == []

    # "gpuready" somewhere but not as the prefix is not ours.
    lookalike = FakeScontrol("DOWN+DRAIN", "admin: was gpuready: drift")
    assert resume_if_ours("gpu02", runner=lookalike) is Action.LEFT_ALONE

    idle = FakeScontrol("IDLE", None)
    assert resume_if_ours("gpu02", runner=idle) is Action.NOT_DRAINED
    assert idle.updates() == []


def test_node_names_that_scontrol_would_expand_are_refused() -> None:
    fake = FakeScontrol()
    for bad in ("gpu[01-04]", "gpu01,gpu02", "gpu01 State=DOWN", ""):
        with pytest.raises(BadInputError):
            drain(bad, "gpuready: x", runner=fake)
    assert fake.calls == []


def test_scontrol_refusal_is_one_line() -> None:
    fake = FakeScontrol(rc=1)
    with pytest.raises(SlurmError) as info:
        drain("gpu02", "gpuready: x", runner=fake)
    assert str(info.value) == (
        "scontrol update NodeName=gpu02 failed: slurm_update error: Invalid node name specified"
    )


def test_parse_show_node_keeps_spaces_in_the_reason_and_drops_the_stamp() -> None:
    state = parse_show_node(show("IDLE+DRAIN", "gpuready: drift since x: driver"), "gpu02")
    assert state.reason == "gpuready: drift since x: driver"
    assert state.drained
    assert state.ours
    assert parse_show_node(show("ALLOCATED", None), "gpu02").reason is None
    assert not parse_show_node(show("ALLOCATED", None), "gpu02").drained
    with pytest.raises(SlurmError, match="gave no node"):
        parse_show_node("", "gpu02")


def test_missing_scontrol_is_could_not_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SlurmError, match=r"^scontrol not found: --slurm-drain needs"):
        run_scontrol(["scontrol", "show", "node", "gpu02"])


def test_verdicts_used_above_are_the_ones_intended() -> None:
    assert [r.verdict for r in fleet()] == [
        Verdict.CERTIFIED,
        Verdict.NOT_CERTIFIED,
        Verdict.UNKNOWN,
    ]


def test_nhc_line_for_a_clean_node_and_an_unchecked_one() -> None:
    code, line = nhc_line([as_host(clean(), "gpu01"), as_host(never(), "gpu03")])
    assert (code, line) == (
        1,
        "gpuready: gpu03: never certified: run gpuready certify first",
    )


def test_nhc_line_of_an_interrupted_run_exits_130() -> None:
    code, _ = nhc_line([capped()], interrupted=True)
    assert code == 130
    assert nhc_line([]) == (1, "gpuready: unknown: no node was checked")
