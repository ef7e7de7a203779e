"""Per-node drift with a node-local history: the certificate comes from files.

certify runs on a controller into its own history and ``--report-dir``; each node's
drift then keeps its own (node-local, empty) history and reads its certificate from
the shared ``certificates/`` folder (``--certificates DIR``, read only) or from the copy
the drift-timer role puts at ``/var/lib/gpuready/certificate.json``
(:data:`~validator.service.drift_service.NODE_CERTIFICATE`, pointed at a temporary file
here). Every case runs the CLI as typed, against real SQLite.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.cli.test_cli_drift import write_inventory
from validator.cli.main import main
from validator.service import drift_service

HEALTHY = "healthy-8x-h100-sxm"
CAPPED = "one-gpu-power-capped"
HOST = "h100-node-01"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def node_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The node's certificate path, absent unless a test puts a file there."""
    path = tmp_path / "var-lib-gpuready" / "certificate.json"
    monkeypatch.setattr(drift_service, "NODE_CERTIFICATE", str(path))
    return path


@pytest.fixture
def shared(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """The controller's certificates/ folder after certifying the simulated node."""
    report = tmp_path / "shared" / "report"
    code, _, _ = run(
        capsys, "certify", "--simulate", HEALTHY, "--burn", "2s",
        "--db", str(tmp_path / "controller.db"), "--report-dir", str(report),
    )  # fmt: skip
    assert code == 0
    folder = report / "certificates"
    assert (folder / f"{HOST}.json").is_file()
    return folder


def local_db(tmp_path: Path) -> str:
    return str(tmp_path / "node" / "history.db")


def listing(folder: Path) -> list[tuple[str, int, int]]:
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir())


def test_a_node_local_history_alone_has_no_certificate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "drift", "--simulate", HEALTHY, "--db", local_db(tmp_path))
    assert code == 3
    assert "never certified" in out


def test_the_shared_folder_gives_the_baseline_read_only(
    shared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = listing(shared)
    args = ["drift", "--simulate", HEALTHY, "--db", local_db(tmp_path), "--certificates"]
    code, out, err = run(capsys, *args, str(shared))
    assert (code, err) == (0, "")
    assert out.startswith(f"{HOST}  NO DRIFT  no drift since the certificate of ")
    code, out, _ = run(capsys, "drift", "--simulate", CAPPED, "--db", local_db(tmp_path),
                       "--certificates", str(shared), "--nhc")  # fmt: skip
    assert code == 1
    assert "power_limit (GPU 3)" in out
    assert listing(shared) == before  # nothing written there


def test_the_copy_the_drift_timer_role_puts_on_the_node(
    shared: Path, node_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node_file.parent.mkdir()
    shutil.copyfile(shared / f"{HOST}.json", node_file)
    code, out, err = run(
        capsys, "drift", "--simulate", HEALTHY, "--db", local_db(tmp_path), "--nhc"
    )
    assert (code, err) == (0, "")
    assert out.startswith("gpuready: ok: no drift since the certificate of ")


def test_an_edited_or_linked_file_is_not_a_baseline(
    shared: Path, node_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = shared / f"{HOST}.json"
    data = json.loads(path.read_text())
    data["gpus"][3]["power_limit_enforced_w"] = 500.0
    path.write_text(json.dumps(data, indent=2, sort_keys=True))
    args = ["drift", "--simulate", CAPPED, "--db", local_db(tmp_path)]
    code, out, _ = run(capsys, *args, "--certificates", str(shared))
    assert code == 1
    assert "DRIFT  baseline not trusted: " in out
    assert "was edited after issue" in out
    node_file.parent.mkdir()
    node_file.symlink_to(path)
    code, out, _ = run(capsys, *args)
    assert code == 1
    assert f"certificate file {node_file} cannot be used" in out
    assert "symbolic link" in out


def test_another_hosts_file_under_this_name_is_refused(
    shared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (shared / f"{HOST}.json").rename(shared / "gpu07.json")  # h100-node-01's, as gpu07's
    inventory = write_inventory(tmp_path, {"gpu07": HEALTHY})
    code, out, _ = run(
        capsys, "drift", "-i", str(inventory), "--transport", "local",
        "--db", local_db(tmp_path), "--certificates", str(shared), "--json",
    )  # fmt: skip
    (node,) = json.loads(out)["nodes"]
    assert code == 1
    assert node["verdict"] == "NOT_CERTIFIED"
    assert "another node's certificate is no baseline for it" in node["findings"][0]["message"]


def test_a_fleet_reads_each_hosts_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inventory = write_inventory(tmp_path, {"gpu01": HEALTHY, "gpu02": HEALTHY})
    report = tmp_path / "report"
    code, _, err = run(
        capsys, "certify", "-i", str(inventory), "--transport", "local", "--burn", "2s",
        "--db", str(tmp_path / "controller.db"), "--report-dir", str(report),
    )  # fmt: skip
    assert code == 0, err
    drifted = write_inventory(tmp_path, {"gpu01": HEALTHY, "gpu02": CAPPED, "gpu03": HEALTHY})
    code, out, _ = run(
        capsys, "drift", "-i", str(drifted), "--transport", "local",
        "--db", local_db(tmp_path), "--certificates", str(report / "certificates"), "--json",
    )  # fmt: skip
    verdicts = {n["hostname"]: n["verdict"] for n in json.loads(out)["nodes"]}
    assert verdicts == {"gpu01": "CERTIFIED", "gpu02": "NOT_CERTIFIED", "gpu03": "UNKNOWN"}
    assert code == 1


def test_a_failed_certification_in_the_local_history_revokes_the_file(
    shared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = local_db(tmp_path)
    code, _, _ = run(capsys, "certify", "--simulate", CAPPED, "--db", db, "--burn", "0")
    assert code == 1
    code, out, _ = run(
        capsys, "drift", "--simulate", HEALTHY, "--db", db, "--certificates", str(shared)
    )
    assert code == 1
    assert "last certification on " in out
    assert "power.limit (GPU 3)" in out


def test_bad_usage(shared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "drift", "--simulate", HEALTHY, "--certificates",
                       str(tmp_path / "absent"), "--db", local_db(tmp_path))  # fmt: skip
    assert code == 2
    assert "does not exist" in err
    code, _, err = run(capsys, "drift", "--simulate", HEALTHY, "--db", local_db(tmp_path),
                       "--certificates", str(shared), "--certificate",
                       str(shared / f"{HOST}.json"))  # fmt: skip
    assert code == 2
    assert "give --certificate FILE or --certificates DIR, not both" in err


def test_a_node_that_calls_itself_by_its_full_name_finds_its_short_names_file(
    shared: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Inventories name nodes short (gpu07); a node's own hostname is often its FQDN."""
    from validator.node.sim.scenario import SCENARIO_DIR

    scenario = json.loads((SCENARIO_DIR / f"{HEALTHY}.json").read_text())
    scenario["host"]["hostname"] = f"{HOST}.cluster.example"
    full_name = tmp_path / "full-name.json"
    full_name.write_text(json.dumps(scenario))
    args = ["drift", "--simulate", str(full_name), "--db", local_db(tmp_path)]
    code, out, err = run(capsys, *args, "--certificates", str(shared))
    assert (code, err) == (0, ""), out
    assert out.startswith(f"{HOST}.cluster.example  NO DRIFT  no drift since the certificate of ")
