"""Busy GPUs and --gpus as the user types them: certify, verify-cert, and a fleet through local."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from validator.cli.main import main
from validator.error_tree import ExitCode
from validator.model import HostSpec, TransportName, Verdict
from validator.remote.transport import AgentRequest
from validator.service.collect_and_judge import FleetRequest, Reach, certify_fleet

BUSY = "busy-gpu-8x-h100-sxm"
HEALTHY = "healthy-8x-h100-sxm"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def node_of(out: str) -> dict[str, Any]:
    node: dict[str, Any] = json.loads(out)["nodes"][0]
    return node


def test_a_busy_gpu_is_not_burned_and_the_node_is_unknown(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The defect: certify burned beside the job's process and judged the hardware.
    code, out, _ = run(capsys, "certify", "--simulate", BUSY, "--burn", "3s", "--json")
    node = node_of(out)
    assert code == ExitCode.COULD_NOT_RUN
    assert node["verdict"] == "UNKNOWN"
    assert "GPU 2 is busy (pid 1002127 python)" in node["summary"]
    assert node["facts"]["burn"]["elapsed_s"] == 0.0
    assert node["facts"]["burn"]["gpus"] == []
    busy = [f for f in node["findings"] if f["check"] == "state.busy"]
    assert [(f["severity"], f["gpu_index"], f["action"]) for f in busy] == [
        ("UNKNOWN", 2, "wait_for_idle_gpus")
    ]
    assert "--allow-busy" in busy[0]["message"]
    # Nothing that could not run says "run it again": the GPUs must be freed first.
    assert all(f["action"] != "rerun" for f in node["findings"] if f["severity"] == "UNKNOWN")


def test_the_terminal_names_the_gpu_pid_and_what_to_do(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "certify", "--simulate", BUSY, "--burn", "3s", "--no-color")
    assert code == ExitCode.COULD_NOT_RUN
    assert "UNKNOWN" in out.splitlines()[0]
    assert "GPU 2 is busy (pid 1002127 python)" in out
    assert "drain the node or wait for its jobs to end" in out


def test_allow_busy_burns_anyway_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "certify", "--simulate", BUSY, "--burn", "3s", "--allow-busy", "--json"
    )
    node = node_of(out)
    assert code == ExitCode.OK
    assert node["verdict"] == "CERTIFIED"
    assert len(node["facts"]["burn"]["gpus"]) == 8
    busy = [f for f in node["findings"] if f["check"] == "state.busy"]
    assert [(f["severity"], f["gpu_index"]) for f in busy] == [("WARN", 2)]
    assert "--allow-busy" in busy[0]["message"]
    assert node["facts"]["allow_busy"] is True


def test_gpus_certifies_just_those_and_the_certificate_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    report = tmp_path / "report"
    code, out, _ = run(
        capsys, "certify", "--simulate", HEALTHY, "--burn", "3s", "--gpus", "3",
        "--report-dir", str(report), "--json",
    )  # fmt: skip
    node = node_of(out)
    assert code == ExitCode.OK
    assert node["verdict"] == "CERTIFIED"
    assert [gpu["index"] for gpu in node["facts"]["burn"]["gpus"]] == [3]
    assert len(node["facts"]["gpus"]) == 8  # every GPU read: the node's identity
    assert {f["gpu_index"] for f in node["findings"]} <= {None, 3}
    assert node["summary"].startswith("GPU 3 of 8")
    certificate = report / "certificates" / "h100-node-01.json"
    assert json.loads(certificate.read_text())["certified_gpus"] == [3]
    code, out, _ = run(capsys, "verify-cert", str(certificate))
    assert code == ExitCode.OK
    assert "for GPU 3 of 8 is intact" in out


def test_a_whole_node_certificate_has_no_subset_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    report = tmp_path / "report"
    run(capsys, "certify", "--simulate", HEALTHY, "--burn", "3s", "--report-dir", str(report))
    text = (report / "certificates" / "h100-node-01.json").read_text()
    assert "certified_gpus" not in text
    code, out, _ = run(capsys, "verify-cert", str(report / "certificates" / "h100-node-01.json"))
    assert code == ExitCode.OK
    assert " of 8 " not in out


def test_gpus_beside_a_busy_gpu_certifies_the_free_one(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "certify",
        "--simulate",
        BUSY,
        "--burn",
        "3s",
        "--gpus",
        "00000000:5D:00.0",
        "--json",
    )
    node = node_of(out)
    assert code == ExitCode.OK
    assert node["facts"]["chosen_gpus"] == [3]


@pytest.mark.parametrize("selector", ["9", "GPU-00000000-dead"])
def test_an_unknown_gpu_is_one_line_listing_the_node_gpus(
    capsys: pytest.CaptureFixture[str], selector: str
) -> None:
    code, out, err = run(
        capsys, "certify", "--simulate", HEALTHY, "--burn", "3s", "--gpus", selector
    )
    assert code == ExitCode.BAD_INPUT
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert "names no GPU of this node" in err
    assert "7 00000000:DB:00.0" in err


def test_the_options_travel_to_the_agent() -> None:
    host = HostSpec(name="a", address="a")
    argv = AgentRequest(gpus=("0", "3"), allow_busy=True).arguments(host)
    assert argv[argv.index("--gpus") + 1] == "0,3"
    assert "--allow-busy" in argv
    assert "--gpus" not in AgentRequest().arguments(host)


def _inventory(path: Path, scenario: str) -> Path:
    path.write_text(
        "all:\n  hosts:\n"
        + "".join(f"    n{i}:\n      gpuready_simulate: {scenario}\n" for i in range(2))
    )
    return path


def test_a_fleet_through_local_gates_busy_hosts_and_passes_the_options(tmp_path: Path) -> None:
    from validator.node.burnin.burn_config import BurnConfig

    inventory = str(_inventory(tmp_path / "hosts.yml", BUSY))
    reach = Reach(inventories=(inventory,), transport=TransportName.LOCAL)
    burn = BurnConfig(duration_s=2.0)
    gated = certify_fleet(FleetRequest(reach, burn=burn))
    assert {node.verdict for node in gated.nodes} == {Verdict.UNKNOWN}
    assert all("GPU 2 is busy" in node.summary for node in gated.nodes)
    chosen = certify_fleet(FleetRequest(reach, burn=burn, gpus=("3",)))
    assert {node.verdict for node in chosen.nodes} == {Verdict.CERTIFIED}
    assert {node.facts.chosen_gpus for node in chosen.nodes} == {(3,)}
    allowed = certify_fleet(FleetRequest(reach, burn=burn, allow_busy=True))
    assert {node.verdict for node in allowed.nodes} == {Verdict.CERTIFIED}


def _power_capped(tmp_path: Path, gpu: int) -> str:
    path = tmp_path / f"capped-{gpu}.json"
    path.write_text(
        json.dumps(
            {
                "name": f"capped-{gpu}",
                "extends": HEALTHY,
                "nvml": {"gpu_overrides": {str(gpu): {"power_limit_enforced_w": 500}}},
            }
        )
    )
    return str(path)


def test_drift_against_a_subset_certificate_compares_those_gpus_and_never_reads_clean(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The defect: after certify --gpus 3, drift --nhc said "ok: no drift" and exited 0,
    # as if the whole node had been certified.
    code, _, _ = run(capsys, "certify", "--simulate", HEALTHY, "--burn", "3s", "--gpus", "3")
    assert code == ExitCode.OK
    # GPU 5 was not certified: a cap there is not drift against this certificate, but
    # the node is not shown unchanged either...
    code, out, _ = run(capsys, "drift", "--simulate", _power_capped(tmp_path, 5))
    assert code == ExitCode.COULD_NOT_RUN
    assert "NO DRIFT" not in out
    assert "certified only GPU 3 of 8: certify the whole node" in out
    assert "cannot vouch for GPUs 0, 1, 2, 4, 5, 6, 7" in out
    # ...so a Slurm health check fails it, in one clear line.
    code, out, _ = run(capsys, "drift", "--simulate", HEALTHY, "--nhc")
    assert code == ExitCode.NOT_CERTIFIED
    assert out.startswith("gpuready:")
    assert "ok:" not in out
    assert "certified only GPU 3 of 8: certify the whole node" in out
    # ...and drift on GPU 3, which it certified, is drift.
    code, out, _ = run(capsys, "drift", "--simulate", _power_capped(tmp_path, 3))
    assert code == ExitCode.NOT_CERTIFIED
    assert "power limit lowered from 700 W to 500 W" in out


def test_drift_against_a_whole_node_certificate_has_no_scope_warning(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    run(capsys, "certify", "--simulate", HEALTHY, "--burn", "3s")
    code, out, _ = run(capsys, "drift", "--simulate", _power_capped(tmp_path, 5))
    assert code == ExitCode.NOT_CERTIFIED
    assert "drift.scope" not in out


@pytest.mark.parametrize(("gpus", "verdict"), [("0", "CERTIFIED"), ("3", "NOT_CERTIFIED")])
def test_dcgm_runs_on_the_chosen_gpus_and_only_their_results_count(
    capsys: pytest.CaptureFixture[str], gpus: str, verdict: str
) -> None:
    # The scenario's DCGM fails GPU 3's memory tests: only a run that chose GPU 3 says so.
    code, out, _ = run(
        capsys, "certify", "--simulate", "dcgm-memtest-failure", "--burn", "2s",
        "--dcgm-level", "2", "--gpus", gpus, "--json",
    )  # fmt: skip
    node = node_of(out)
    assert node["verdict"] == verdict
    assert code == (ExitCode.OK if verdict == "CERTIFIED" else ExitCode.NOT_CERTIFIED)
    assert node["facts"]["dcgm"]["source"] == f"dcgmi diag -r 2 -i {gpus} -j"
    assert {f["gpu_index"] for f in node["findings"]} <= {None, int(gpus)}


# scontrol listpids on a node where job 5123 runs (its batch step and one task).
LISTPIDS = "PID      JOBID    STEPID   LOCALID GLOBALID\n1002127  5123     batch    0       0\n"


def _with_slurm_job(tmp_path: Path) -> str:
    path = tmp_path / "slurm-job.json"
    path.write_text(
        json.dumps(
            {
                "name": "slurm-job",
                "extends": HEALTHY,
                "commands": {"scontrol listpids": {"rc": 0, "stdout": LISTPIDS, "stderr": ""}},
            }
        )
    )
    return str(path)


def test_another_slurm_job_on_the_node_makes_it_busy(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    scenario = _with_slurm_job(tmp_path)
    code, out, _ = run(capsys, "certify", "--simulate", scenario, "--burn", "2s", "--json")
    node = node_of(out)
    assert code == ExitCode.COULD_NOT_RUN
    assert node["verdict"] == "UNKNOWN"
    assert "Slurm job 5123 running on this node" in node["summary"]
    assert node["facts"]["slurm_jobs"] == ["5123"]


def test_our_own_slurm_job_is_not_another(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "5123")  # gpuready runs inside that job
    code, out, _ = run(
        capsys, "certify", "--simulate", _with_slurm_job(tmp_path), "--burn", "2s", "--json"
    )
    assert code == ExitCode.OK
    assert node_of(out)["facts"]["slurm_jobs"] == []


def busy_variant(tmp_path: Path, name: str, gpu_5: dict[str, Any]) -> str:
    """The busy scenario's JSON, with GPU 5 also broken as ``gpu_5`` says."""
    source = Path(__file__).parents[2] / "validator" / "node" / "scenarios" / f"{BUSY}.json"
    data = json.loads(source.read_text())
    data["name"] = name
    data["nvml"]["gpu_overrides"]["5"] = gpu_5
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize(
    ("name", "gpu_5", "check"),
    [
        ("busy-and-remap-failed", {"remap_failure": True}, "errors.row_remap"),
        ("busy-and-gpu-5-lost", {"lost": True}, None),
    ],
)
def test_a_busy_node_with_a_failed_check_is_not_certified_and_still_says_busy(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    name: str,
    gpu_5: dict[str, Any],
    check: str | None,
) -> None:
    # The defect: busy won over every failure, so a node out of spare rows read UNKNOWN,
    # "wait for its jobs", and no one was sent to drain it.
    scenario = busy_variant(tmp_path, name, gpu_5)
    code, out, _ = run(capsys, "certify", "--simulate", scenario, "--burn", "3s", "--json")
    node = node_of(out)
    assert code == ExitCode.NOT_CERTIFIED, node["summary"]
    assert node["verdict"] == "NOT_CERTIFIED"
    failed = [f for f in node["findings"] if f["severity"] == "FAIL"]
    assert failed
    assert all(f["gpu_index"] in (5, None) for f in failed), failed
    if check is not None:
        assert check in {f["check"] for f in failed}
    busy = [f for f in node["findings"] if f["check"] == "state.busy"]
    assert [(f["severity"], f["gpu_index"]) for f in busy] == [("UNKNOWN", 2)]
    assert "GPU 2 is busy (pid 1002127 python)" in node["summary"]
    assert "failed" in node["summary"]
    # Nothing judged from the burn it did not run fails the node.
    assert not [f for f in failed if f["check"].startswith(("burn.", "figures."))]


@pytest.mark.parametrize(
    ("marker", "code", "verdict", "required", "words"),
    [
        (
            {"nvml_error": "NVML_ERROR_UNKNOWN"},
            ExitCode.NOT_CERTIFIED,
            "NOT_CERTIFIED",
            True,
            "running processes could not be read",
        ),
        ("not_supported", ExitCode.OK, "CERTIFIED", False, "NVML does not support listing"),
    ],
)
def test_a_process_list_that_could_not_be_read_is_never_a_silent_pass(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    marker: object,
    code: int,
    verdict: str,
    required: bool,
    words: str,
) -> None:
    # The defect: NVML's process query failed, the GPU was burned as if free, and the
    # node was certified with nothing saying the run could not tell.
    path = tmp_path / "procs-unreadable.json"
    overrides = {"3": {"compute_processes": marker}}
    path.write_text(json.dumps({"extends": HEALTHY, "nvml": {"gpu_overrides": overrides}}))
    got, out, _ = run(capsys, "certify", "--simulate", str(path), "--burn", "3s", "--json")
    node = node_of(out)
    assert (got, node["verdict"]) == (code, verdict), node["summary"]
    busy = [f for f in node["findings"] if f["check"] == "state.busy"]
    assert [(f["severity"], f["gpu_index"], f["required"]) for f in busy] == [
        ("UNKNOWN", 3, required)
    ]
    assert words in busy[0]["message"]
    assert "could not tell whether GPU 3 was free" in busy[0]["message"]
