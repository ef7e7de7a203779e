"""`gpuready certify -i` over real SSH to real sshd test hosts (network namespaces)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from tests.hosts.testhosts import TestHostPool, generate_ed25519
from validator.cli.main import main
from validator.error_tree import ExitCode
from validator.model import NodeResult, Verdict
from validator.node.burnin.burn_config import BurnConfig
from validator.service.collect_and_judge import FleetRequest, Reach, certify_fleet

pytestmark = pytest.mark.hosts


def verdicts(document: dict) -> dict[str, str]:
    return {node["hostname"]: node["verdict"] for node in document["nodes"]}


def failed_checks(document: dict, host: str) -> set[tuple[str, int | None]]:
    (node,) = [n for n in document["nodes"] if n["hostname"] == host]
    return {(f["check"], f["gpu_index"]) for f in node["findings"] if f["severity"] == "FAIL"}


def certify_cli(
    capsys: pytest.CaptureFixture[str], inventory: Path, known_hosts: Path, *extra: str
) -> tuple[int, dict, str]:
    code = main(
        ["certify", "-i", str(inventory), "--known-hosts", str(known_hosts), "--json",
         "--json-form", "full", *extra]
    )  # fmt: skip
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def test_healthy_throttling_and_unreachable_hosts(
    test_hosts: TestHostPool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    healthy, hot, gone = test_hosts.start(
        ["healthy-8x-h100-sxm", "one-gpu-thermal-throttling", None]
    )
    inventory = test_hosts.write_inventory(tmp_path / "inventory.ini")
    known_hosts = test_hosts.known_hosts(tmp_path / "known_hosts")
    report_dir = tmp_path / "reports"
    code, document, err = certify_cli(
        capsys, inventory, known_hosts, "--burn", "2s", "--connect-timeout", "3",
        "--report-dir", str(report_dir),
    )  # fmt: skip
    assert code == ExitCode.NOT_CERTIFIED, err
    assert verdicts(document) == {
        healthy.name: "CERTIFIED",
        hot.name: "NOT_CERTIFIED",
        gone.name: "UNKNOWN",
    }
    assert ("burn.throttle", 4) in failed_checks(document, hot.name)
    (unreachable,) = [n for n in document["nodes"] if n["hostname"] == gone.name]
    assert unreachable["findings"][0]["check"] == "transport.reach"
    # The agent really ran on each reachable host: its own hostname and a simulated burn.
    (node,) = [n for n in document["nodes"] if n["hostname"] == healthy.name]
    assert node["facts"]["hostname"] == healthy.name
    assert node["facts"]["burn"]["simulated"] is True
    assert node["transport"] == "ssh"
    # The families beside the GPUs came back with the agent's facts and were judged.
    for family in ("network", "gpudirect", "host", "container"):
        assert node["facts"][family] is not None, family
        assert any(f["check"].startswith(f"{family}.") for f in node["findings"]), family
    assert len(node["facts"]["network"]["hcas"]) == 8
    # Each host's result was written as it arrived, and the full reports at the end.
    assert sorted(p.name for p in (report_dir / "hosts").iterdir()) == sorted(
        f"{h.name}.json" for h in (healthy, hot, gone)
    )
    assert (report_dir / "report.html").is_file()
    assert document["fleet"]["hosts"] == 3


def test_sshd_killed_mid_run_is_unknown_while_the_others_certify(
    test_hosts: TestHostPool, tmp_path: Path
) -> None:
    hosts = test_hosts.start(["healthy-8x-h100-sxm"] * 3)
    inventory = test_hosts.write_inventory(tmp_path / "inventory.ini")
    known_hosts = test_hosts.known_hosts(tmp_path / "known_hosts")
    victim = hosts[1]
    arrived: list[NodeResult] = []

    def kill_soon() -> None:
        time.sleep(2.0)  # connected and burning by now
        victim.stop_sshd()

    killer = threading.Thread(target=kill_soon)
    killer.start()
    report = certify_fleet(
        FleetRequest(
            Reach(inventories=(str(inventory),), known_hosts=str(known_hosts)),
            burn=BurnConfig(duration_s=5.0),
            deadline_s=60.0,
        ),
        on_results=arrived.extend,
    )
    killer.join()
    by_name = {node.hostname: node for node in report.nodes}
    assert by_name[victim.name].verdict is Verdict.UNKNOWN
    assert [by_name[h.name].verdict for h in hosts if h is not victim] == [Verdict.CERTIFIED] * 2
    assert len(arrived) == 3


def test_changed_host_key_is_refused(
    test_hosts: TestHostPool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (host,) = test_hosts.start(["healthy-8x-h100-sxm"])
    inventory = test_hosts.write_inventory(tmp_path / "inventory.ini")
    known_hosts = test_hosts.known_hosts(tmp_path / "known_hosts")
    host.rotate_host_key()
    code, document, _ = certify_cli(
        capsys, inventory, known_hosts, "--burn", "0", "--accept-new-host-keys"
    )
    assert code == ExitCode.COULD_NOT_RUN
    (node,) = document["nodes"]
    assert node["verdict"] == "UNKNOWN"
    assert "CHANGED" in node["summary"]
    assert "\n" not in node["summary"]


def test_unknown_host_key_needs_accept_new(
    test_hosts: TestHostPool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (host,) = test_hosts.start(["healthy-8x-h100-sxm"])
    inventory = test_hosts.write_inventory(
        tmp_path / "inventory.ini", extra_vars={"gpuready_require_burn": False}
    )
    known_hosts = tmp_path / "known_hosts"
    code, document, _ = certify_cli(capsys, inventory, known_hosts, "--burn", "0")
    assert document["nodes"][0]["verdict"] == "UNKNOWN"
    assert "--accept-new-host-keys" in document["nodes"][0]["summary"]
    code, document, _ = certify_cli(
        capsys, inventory, known_hosts, "--burn", "0", "--accept-new-host-keys"
    )
    assert document["nodes"][0]["verdict"] == "CERTIFIED", document["nodes"][0]["summary"]
    assert code == ExitCode.OK
    assert host.address in known_hosts.read_text()


def test_wrong_key_is_a_one_line_auth_error(
    test_hosts: TestHostPool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    test_hosts.start(["healthy-8x-h100-sxm"])
    wrong_key = tmp_path / "wrong_key"
    private, _public = generate_ed25519()
    wrong_key.write_bytes(private)
    wrong_key.chmod(0o600)
    inventory = test_hosts.write_inventory(
        tmp_path / "inventory.ini", extra_vars={"ansible_ssh_private_key_file": str(wrong_key)}
    )
    known_hosts = test_hosts.known_hosts(tmp_path / "known_hosts")
    code, document, err = certify_cli(capsys, inventory, known_hosts, "--burn", "0")
    (node,) = document["nodes"]
    assert code == ExitCode.COULD_NOT_RUN
    assert node["verdict"] == "UNKNOWN"
    assert "authentication failed" in node["summary"]
    assert "PRIVATE KEY" not in node["summary"] + err
    assert "Traceback" not in err


def test_ansible_transport_gives_the_same_verdicts_as_ssh(
    test_hosts: TestHostPool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    test_hosts.start(["healthy-8x-h100-sxm", "one-gpu-power-capped"])
    inventory = test_hosts.write_inventory(tmp_path / "inventory.ini")
    known_hosts = test_hosts.known_hosts(tmp_path / "known_hosts")
    monkeypatch.setenv(
        "ANSIBLE_SSH_ARGS", f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes"
    )
    _, over_ssh, _ = certify_cli(capsys, inventory, known_hosts, "--burn", "1s")
    _, over_ansible, err = certify_cli(
        capsys, inventory, known_hosts, "--burn", "1s", "--transport", "ansible"
    )
    assert verdicts(over_ansible) == verdicts(over_ssh), err
    assert set(verdicts(over_ssh).values()) == {"CERTIFIED", "NOT_CERTIFIED"}
    for node in over_ansible["nodes"]:
        assert node["transport"] == "ansible"
        assert failed_checks(over_ansible, node["hostname"]) == failed_checks(
            over_ssh, node["hostname"]
        )
