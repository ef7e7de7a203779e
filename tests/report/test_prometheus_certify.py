"""certify --prom-file: each node's verdict and each GPU's figures, read back by the parser.

Every file here is parsed with prometheus_client's own parser
(``text_string_to_metric_families``), and the figures are checked against the JSON report
of the same run, so a series that carried the wrong GPU's value, the wrong unit or a
sample for what was never measured fails.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import io
import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from validator import __version__
from validator.cli.main import main
from validator.model import NOT_SUPPORTED, KernelLogFacts, NodeResult, Report, Unavailable
from validator.model.measured import Reason
from validator.report.prometheus_certify import SERIES, render_certify_prometheus
from validator.store import Store

NOW = datetime.datetime(2026, 1, 2, 8, 0, tzinfo=datetime.timezone.utc)
HOST = "h100-node-01"  # the host the built-in H100 scenarios report
README = Path(__file__).resolve().parents[2] / "README.md"
DRIFT_SERIES = {
    "gpuready_drift_detected",
    "gpuready_drift_status",
    "gpuready_drift_findings",
    "gpuready_drift_last_run_timestamp_seconds",
    "gpuready_certified",  # deprecated
    "gpuready_last_check_timestamp_seconds",  # deprecated
}


def certify(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any], str]:
    """``gpuready certify --json ARGS`` as typed; the exit code, the report, stderr."""
    code = main(["certify", "--json", *args])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def samples(text: str) -> dict[str, list[Sample]]:
    """Each sample name's samples, as Prometheus's client parser reads the file."""
    found: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, []).append(sample)
    return found


def per_gpu(found: dict[str, list[Sample]], name: str, **labels: str) -> dict[int, float]:
    """One series' values by GPU index, for the samples whose other labels match."""
    return {
        int(s.labels["gpu"]): s.value
        for s in found.get(name, [])
        if all(s.labels.get(key) == value for key, value in labels.items())
    }


def families(text: str) -> dict[str, str]:
    """Each family's type by name (a counter's without ``_total``)."""
    return {family.name: family.type for family in text_string_to_metric_families(text)}


# ------------------------------------------------------------------ a faulty GPU among eight


@pytest.fixture(scope="module")
def remap_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], str, float]:
    """row-remap-pending (GPU 2: a row remap pending, Xid 63) certified with a short burn."""
    tmp = tmp_path_factory.mktemp("remap")
    prom = tmp / "gpuready.prom"
    before = time.time()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(tmp))
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = main(
                ["certify", "--json", "--simulate", "row-remap-pending", "--burn", "2s",
                 "--interconnect", "--db", str(tmp / "h.db"), "--prom-file", str(prom)]
            )  # fmt: skip
    return code, json.loads(out.getvalue()), prom.read_text(), before


def test_the_verdict_and_the_versions_are_node_series(
    remap_run: tuple[int, dict[str, Any], str, float],
) -> None:
    code, report, text, before = remap_run
    assert code == 1
    (node,) = report["nodes"]
    found = samples(text)
    assert [(s.labels, s.value) for s in found["gpuready_node_certified"]] == [({"host": HOST}, 0)]
    verdicts = {s.labels["verdict"]: s.value for s in found["gpuready_node_verdict"]}
    assert verdicts == {"certified": 0, "not_certified": 1, "unknown": 0}
    (info,) = found["gpuready_node_info"]
    facts = node["facts"]
    assert info.labels == {
        "host": HOST,
        "driver": facts["driver_version"],
        "cuda": facts["cuda_driver_version"],
        "sku": node["sku"],
        "source": "simulate",
    }
    assert info.value == 1
    assert [s.value for s in found["gpuready_node_gpus"]] == [len(facts["gpus"])]
    (stamp,) = found["gpuready_certify_last_run_timestamp_seconds"]
    assert before <= stamp.value <= time.time()
    assert [(s.labels, s.value) for s in found["gpuready_build_info"]] == [
        ({"version": __version__}, 1)
    ]


def test_each_gpu_is_labelled_with_its_index_uuid_and_serial(
    remap_run: tuple[int, dict[str, Any], str, float],
) -> None:
    _, report, text, _ = remap_run
    gpus = report["nodes"][0]["facts"]["gpus"]
    assert len(gpus) == 8
    expected = {(str(g["index"]), g["uuid"], g["serial"]) for g in gpus}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("gpuready_gpu_"):
            continue
        seen = {(s.labels["gpu"], s.labels["uuid"], s.labels["serial"]) for s in family.samples}
        assert seen <= expected, family.name
        assert all(s.labels["host"] == HOST for s in family.samples)


def test_the_figures_are_the_reports_in_base_units(
    remap_run: tuple[int, dict[str, Any], str, float],
) -> None:
    _, report, text, _ = remap_run
    facts = report["nodes"][0]["facts"]
    found = samples(text)
    flops = per_gpu(found, "gpuready_gpu_burn_floating_point_operations_per_second", dtype="bf16")
    assert flops == {g["index"]: g["tflops"] * 1e12 for g in facts["burn"]["gpus"]}
    limits = per_gpu(found, "gpuready_gpu_power_limit_watts")
    assert limits == {g["index"]: g["power_limit_enforced_w"] for g in facts["gpus"]}
    clocks = per_gpu(found, "gpuready_gpu_sm_clock_max_hertz")
    assert clocks == {g["index"]: g["sm_clock_max_mhz"] * 1e6 for g in facts["gpus"]}
    copies = facts["interconnect"]["gpus"]
    hbm = per_gpu(found, "gpuready_gpu_memory_bandwidth_bytes_per_second")
    assert hbm == pytest.approx({c["index"]: c["hbm"]["gb_s"] * 1e9 for c in copies})
    h2d = per_gpu(found, "gpuready_gpu_host_bandwidth_bytes_per_second", direction="host_to_device")
    assert h2d == pytest.approx({c["index"]: c["h2d"]["gb_s"] * 1e9 for c in copies})
    peers = {
        (int(s.labels["gpu"]), int(s.labels["peer"])): s.value
        for s in found["gpuready_gpu_peer_bandwidth_bytes_per_second"]
        if s.labels["mode"] == "unidirectional"
    }
    measured = {
        (p["src"], p["dst"]): p["unidirectional"]["gb_s"] * 1e9
        for p in facts["interconnect"]["peers"]
        if p["src"] != p["dst"] and isinstance(p["unidirectional"]["gb_s"], float)
    }
    assert measured
    assert peers == pytest.approx(measured)
    # Power and temperature under load: the load samples' median and peak, per GPU.
    power = per_gpu(found, "gpuready_gpu_burn_power_watts")
    peak = per_gpu(found, "gpuready_gpu_burn_peak_power_watts")
    hot = per_gpu(found, "gpuready_gpu_burn_peak_temperature_celsius")
    assert set(power) == set(peak) == set(hot) == set(range(8))
    for index in range(8):
        assert 0 < power[index] <= peak[index] <= 1.1 * limits[index]
        assert 20 < hot[index] < 100


def test_the_faulty_gpu_stands_out_in_its_error_counters(
    remap_run: tuple[int, dict[str, Any], str, float],
) -> None:
    _, report, text, _ = remap_run
    found = samples(text)
    pending = per_gpu(found, "gpuready_gpu_row_remap_pending")
    assert pending == {index: float(index == 2) for index in range(8)}
    rows = per_gpu(found, "gpuready_gpu_remapped_rows_total", kind="uncorrectable")
    assert {i for i, v in rows.items() if v > 0} == {2}
    xids = per_gpu(found, "gpuready_gpu_xid_events")
    assert set(xids) == set(range(8))
    assert {i for i, v in xids.items() if v > 0} == {2}
    volatile = per_gpu(found, "gpuready_gpu_ecc_volatile_errors_total", kind="uncorrected")
    gpu2 = report["nodes"][0]["facts"]["gpus"][2]
    assert volatile[2] == gpu2["ecc_volatile_uncorrected"] > 0
    types = families(text)
    for name in ("gpuready_gpu_ecc_volatile_errors", "gpuready_gpu_pcie_replays"):
        assert types[name] == "counter"
    assert types["gpuready_gpu_xid_events"] == "gauge"  # in a window: it can fall
    assert types["gpuready_gpu_burn_power_watts"] == "gauge"


# ------------------------------------------------------------------ not measured: no sample


def _judged(scenario: str) -> NodeResult:
    """The scenario collected and judged without a burn or interconnect measurement."""
    from validator.service.certify_service import CertifyRequest, certify_node

    (node,) = certify_node(CertifyRequest(simulate=scenario, interconnect=False)).nodes
    return node


def test_what_was_not_measured_has_no_sample_and_a_zero_is_a_reading() -> None:
    node = _judged("healthy-8x-h100-sxm")
    gpus = list(node.facts.gpus)
    gpus[3] = dataclasses.replace(
        gpus[3], pcie_replay_count=NOT_SUPPORTED, ecc_volatile_corrected=NOT_SUPPORTED
    )
    unread = KernelLogFacts("dmesg", 24.0, events=Unavailable(Reason.NO_PERMISSION))
    facts = dataclasses.replace(node.facts, gpus=tuple(gpus), kernel_log=unread)
    text = render_certify_prometheus(
        Report("", "", (dataclasses.replace(node, facts=facts),)), now=NOW
    )
    found = samples(text)
    replays = per_gpu(found, "gpuready_gpu_pcie_replays_total")
    assert set(replays) == set(range(8)) - {3}  # GPU 3's could not be read: absent
    assert replays == {g.index: g.pcie_replay_count for g in gpus if g.index != 3}
    assert 0 in replays.values()  # a reading of none is a 0, not a missing sample
    corrected = per_gpu(found, "gpuready_gpu_ecc_volatile_errors_total", kind="corrected")
    assert set(corrected) == set(range(8)) - {3}
    assert 3 in per_gpu(found, "gpuready_gpu_ecc_volatile_errors_total", kind="uncorrected")
    assert "gpuready_gpu_xid_events" not in found  # the kernel log was not read
    # No burn and no interconnect: none of their series, not a zero among them.
    measured_by_burn = [n for n in found if "_burn_" in n or "bandwidth" in n]
    assert measured_by_burn == []
    assert "gpuready_gpu_power_limit_watts" in found


def test_a_lost_gpu_reads_as_not_responding_with_no_figures(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, report, _ = certify(
        capsys, "--simulate", "gpu-fallen-off-bus", "--burn", "2s", "--db", str(tmp_path / "h.db"),
        "--prom-file", str(tmp_path / "g.prom"),
    )  # fmt: skip
    assert code == 1
    found = samples((tmp_path / "g.prom").read_text())
    responding = per_gpu(found, "gpuready_gpu_responding")
    lost = {g["index"] for g in report["nodes"][0]["facts"]["gpus"] if g["status"] != "ok"}
    assert lost == {6}
    assert responding == {index: float(index not in lost) for index in range(8)}
    flops = per_gpu(found, "gpuready_gpu_burn_floating_point_operations_per_second")
    assert set(flops) == set(range(8)) - {6}
    assert 6 not in per_gpu(found, "gpuready_gpu_power_limit_watts")


# ------------------------------------------------------------------ hostile label values


def test_a_hostile_serial_stays_one_label_of_one_series(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    serial = 'SN"1\\2\nfake_metric{x="y"} 1\r\x1b]52;c;x\x07'
    scenario = tmp_path / "scenario.json"
    scenario.write_text(
        json.dumps(
            {
                "name": "hostile-serial",
                "extends": "healthy-8x-h100-sxm",
                "nvml": {"gpu_overrides": {"0": {"serial": serial}}},
            }
        )
    )
    prom = tmp_path / "g.prom"
    code, report, _ = certify(
        capsys, "--simulate", str(scenario), "--burn", "0", "--db", str(tmp_path / "h.db"),
        "--prom-file", str(prom),
    )  # fmt: skip
    assert report["nodes"][0]["facts"]["gpus"][0]["serial"] == serial  # it did reach the facts
    assert code == 1  # --burn 0: not certified
    text = prom.read_text()
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f]", text)  # no raw control character
    assert all(line.startswith(("#", "gpuready_")) for line in text.splitlines())
    found = samples(text)
    infos = found["gpuready_gpu_info"]
    assert len(infos) == 8
    (gpu0,) = [s for s in infos if s.labels["gpu"] == "0"]
    # Controls shown as their escapes; the quote and backslash kept, escaped in the file.
    assert gpu0.labels["serial"] == 'SN"1\\2\\x0afake_metric{x="y"} 1\\x0d\\x1b]52;c;x\\x07'
    assert "fake_metric" not in found


# ------------------------------------------------------------------ a fleet, and failures


def test_a_fleet_file_holds_every_host_and_their_burn_figures(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(
        "[gpu]\ngpu01 gpuready_simulate=healthy-8x-h100-sxm\n"
        "gpu02 gpuready_simulate=one-gpu-power-capped\n"
    )
    prom = tmp_path / "fleet.prom"
    code, report, _ = certify(
        capsys, "-i", str(inventory), "--transport", "local", "--burn", "2s", "--db",
        str(tmp_path / "h.db"), "--prom-file", str(prom),
    )  # fmt: skip
    assert code == 1
    verdicts = {n["hostname"]: n["verdict"] for n in report["nodes"]}
    assert verdicts == {"gpu01": "CERTIFIED", "gpu02": "NOT_CERTIFIED"}
    found = samples(prom.read_text())
    certified = {s.labels["host"]: s.value for s in found["gpuready_node_certified"]}
    assert certified == {"gpu01": 1, "gpu02": 0}
    # The certified host is held without its burn samples until the reports: its median
    # power under load is still worked out from them.
    for host in ("gpu01", "gpu02"):
        power = per_gpu(found, "gpuready_gpu_burn_power_watts", host=host)
        assert set(power) == set(range(8)), host
    limits = per_gpu(found, "gpuready_gpu_power_limit_watts", host="gpu02")
    assert (limits[3], limits[0]) == (500.0, 700.0)


def test_a_missing_folder_is_refused_before_anything_is_measured(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    prom = tmp_path / "absent" / "g.prom"
    code = main(
        ["certify", "--simulate", "healthy-8x-h100-sxm", "--burn", "2s",
         "--db", str(tmp_path / "h.db"), "--prom-file", str(prom)]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == (
        f"gpuready: error: --prom-file {prom}: the folder {prom.parent} does not exist; "
        "create it or give another path\n"
    )
    assert not (tmp_path / "h.db").exists()  # nothing measured, nothing recorded


def test_a_link_planted_at_the_file_is_refused_and_left_alone(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    prom = tmp_path / "g.prom"
    prom.symlink_to(outside / "shadow")
    code = main(
        ["certify", "--simulate", "healthy-8x-h100-sxm", "--burn", "2s",
         "--db", str(tmp_path / "h.db"), "--prom-file", str(prom)]
    )  # fmt: skip
    _, err = capsys.readouterr()
    assert code == 2
    (line,) = err.splitlines()
    assert line.startswith("gpuready: error: ")
    assert str(prom) in line
    assert prom.is_symlink()
    assert list(outside.iterdir()) == []
    assert not (tmp_path / "h.db").exists()  # refused before anything was measured


def test_a_file_that_cannot_be_written_after_measuring_is_exit_3_with_history_kept(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "textfiles"
    folder.mkdir()
    prom = folder / "g.prom"

    def full(src: object, dst: object, **relative: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    # As root, permissions do not stop a write: a full disk is what is left to fail.
    monkeypatch.setattr(os, "replace", full)
    monkeypatch.setattr(os, "rename", full)
    code = main(
        ["certify", "--simulate", "healthy-8x-h100-sxm", "--burn", "2s",
         "--db", str(tmp_path / "h.db"), "--prom-file", str(prom)]
    )  # fmt: skip
    monkeypatch.undo()
    _, err = capsys.readouterr()
    assert code == 3
    (line,) = [line for line in err.splitlines() if line.startswith("gpuready: error:")]
    assert line == (
        f"gpuready: error: cannot write the Prometheus file {prom}: No space left on device "
        "(the results are kept in history)"
    )
    assert list(folder.iterdir()) == []  # no temporary file left behind
    with Store.open(tmp_path / "h.db", readonly=True) as store:
        (latest,) = store.history(HOST)
    assert (latest.kind, latest.verdict) == ("certify", "CERTIFIED")


# ------------------------------------------------------------------ the README's table


def test_the_readme_lists_every_series_and_no_other() -> None:
    text = README.read_text()
    section = text[text.index("## Prometheus") :]
    section = section[: section.index("\n## ", 1)]
    listed = set(re.findall(r"^\| `(gpuready_[a-z_]+)`", section, re.M))
    declared = {series.exposed for series in SERIES}
    assert listed == declared | DRIFT_SERIES
    assert not declared & DRIFT_SERIES  # both files in one folder: no series in both


def test_drift_writes_the_series_the_readme_gives_it() -> None:
    from validator.report.prometheus import render_prometheus

    written = {
        family.name for family in text_string_to_metric_families(render_prometheus([], now=NOW))
    }
    assert written == DRIFT_SERIES


@pytest.mark.parametrize(
    ("gpus", "scope", "count"), [((), "node", 8), (("--gpus", "3,5"), "subset", 2)]
)
def test_the_certified_gpus_series_tells_a_subset_certificate_from_the_whole_node(
    tmp_path: Path, gpus: tuple[str, ...], scope: str, count: int
) -> None:
    # The defect: after certify --gpus 3, gpuready_node_certified read 1 with nothing
    # saying that only one GPU of eight was certified.
    prom = tmp_path / "gpuready.prom"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_STATE_HOME", str(tmp_path))
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = main(
                ["certify", "--simulate", "healthy-8x-h100-sxm", "--burn", "2s", *gpus,
                 "--db", str(tmp_path / "h.db"), "--prom-file", str(prom)]
            )  # fmt: skip
    assert code == 0
    found = samples(prom.read_text())
    assert [s.value for s in found["gpuready_node_certified"]] == [1]
    assert [s.value for s in found["gpuready_node_gpus"]] == [8]
    assert [(s.labels, s.value) for s in found["gpuready_node_certified_gpus"]] == [
        ({"host": HOST, "scope": scope}, count)
    ]


def test_a_node_not_certified_has_no_certified_gpus(
    remap_run: tuple[int, dict[str, Any], str, float],
) -> None:
    found = samples(remap_run[2])
    assert [(s.labels, s.value) for s in found["gpuready_node_certified_gpus"]] == [
        ({"host": HOST, "scope": "node"}, 0)
    ]
