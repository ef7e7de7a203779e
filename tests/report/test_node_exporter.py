"""The textfiles as a real node_exporter serves them: Debian's prometheus-node-exporter.

certify's and drift's files, written by the commands as an operator types them, lie in one
textfile folder; node_exporter (its textfile collector alone) serves them on loopback, and
every series of both files must come back from its /metrics, values and labels intact, a
hostile serial included, with no scrape error. Where the binary is missing the test says
so and skips; under CI (``CI=true``) .ci/test installs it, and a missing binary fails.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from validator.cli.main import main

HOSTILE_SERIAL = 'SN"7\\x\nfake{a="b"} 1'
STARTUP_S = 20.0  # node_exporter answers within a second; a loaded CI machine gets more


def _binary() -> str:
    for name in ("prometheus-node-exporter", "node_exporter"):
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(
            "prometheus-node-exporter is not installed, and CI must run this test: .ci/test "
            "installs Debian's prometheus-node-exporter"
        )
    pytest.skip(
        "prometheus-node-exporter not on PATH (Debian: apt-get install prometheus-node-exporter)"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# Loopback only, and never through a proxy the environment names.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _get(url: str) -> str:
    with _OPENER.open(url, timeout=5) as response:
        return str(response.read().decode("utf-8"))


@contextlib.contextmanager
def node_exporter(folder: Path, log: Path) -> Iterator[str]:
    """node_exporter serving ``folder``'s textfiles on loopback; yields its /metrics URL."""
    binary = _binary()
    for _ in range(3):  # another process may take the port between probe and bind
        port = _free_port()
        argv = [
            binary,
            "--collector.disable-defaults",
            "--collector.textfile",
            f"--collector.textfile.directory={folder}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]
        with log.open("wb") as output:
            process = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}/metrics"
        try:
            if _wait_up(process, url):
                yield url
                return
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if "address already in use" not in log.read_text(errors="replace"):
            break
    pytest.fail(f"node_exporter did not serve /metrics:\n{log.read_text(errors='replace')}")


def _wait_up(process: subprocess.Popen[bytes], url: str) -> bool:
    """Whether node_exporter answers ``url`` before it exits or the start-up time runs out."""
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            _get(url)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
            continue
        return True
    return False


def _gpuready(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(list(argv))
    return code, out.getvalue()


def _scenario(tmp_path: Path, extends: str) -> str:
    """A scenario file: ``extends`` with GPU 0's serial hostile."""
    path = tmp_path / f"{extends}-hostile.json"
    overrides = {"gpu_overrides": {"0": {"serial": HOSTILE_SERIAL}}}
    document = {"name": f"{extends}-hostile", "extends": extends, "nvml": overrides}
    path.write_text(json.dumps(document))
    return str(path)


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_node_exporter_serves_certify_and_drift_series_from_one_folder(tmp_path: Path) -> None:
    _binary()  # skip (or fail under CI) before measuring anything
    folder = tmp_path / "textfile_collector"
    folder.mkdir()
    healthy, remapped = (
        _scenario(tmp_path, "healthy-8x-h100-sxm"),
        _scenario(tmp_path, "row-remap-pending"),
    )
    db = str(tmp_path / "history.db")
    certify_file, drift_file = folder / "gpuready-certify.prom", folder / "gpuready.prom"
    code, _ = _gpuready(
        "certify", "--simulate", healthy, "--burn", "2s", "--db", db,
        "--prom-file", str(certify_file),
    )  # fmt: skip
    assert code == 0
    # Since then, GPU 2 remapped a row: drift finds it.
    code, _ = _gpuready("drift", "--simulate", remapped, "--db", db, "--prom-file", str(drift_file))
    assert code == 1
    written = {**_samples(certify_file.read_text()), **_samples(drift_file.read_text())}
    with node_exporter(folder, tmp_path / "node_exporter.log") as url:
        served = _samples(_get(url))
    errors = [value for (name, _), value in served.items() if name == "node_textfile_scrape_error"]
    assert errors == [0.0], _get_log(tmp_path)
    files = {
        dict(labels)["file"] for (name, labels) in served if name == "node_textfile_mtime_seconds"
    }
    assert {Path(name).name for name in files} == {certify_file.name, drift_file.name}
    ours = {key: value for key, value in served.items() if key[0].startswith("gpuready_")}
    assert ours == written  # every series, every label and value, and nothing else
    names = {name for name, _ in ours}
    for expected in (
        "gpuready_node_certified",
        "gpuready_gpu_burn_power_watts",
        "gpuready_gpu_remapped_rows_total",
        "gpuready_drift_findings",
        "gpuready_drift_detected",
    ):
        assert expected in names
    infos = [dict(labels) for name, labels in ours if name == "gpuready_gpu_info"]
    (gpu0,) = [labels for labels in infos if labels["gpu"] == "0"]
    assert gpu0["serial"] == 'SN"7\\x\\x0afake{a="b"} 1'  # the newline shown, one series
    assert len(infos) == 8


def _get_log(tmp_path: Path) -> str:
    log = tmp_path / "node_exporter.log"
    return log.read_text(errors="replace") if log.exists() else ""
