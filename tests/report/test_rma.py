"""The RMA evidence pack: one file per GPU failed with a hardware action, with every field."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path

import pytest

from tests.collecting import collect_simulated
from tests.report.test_report_samples import burn_node, healthy_node, sample_report
from validator.error_tree import UnsafePathError
from validator.judge import Policy, judge_node
from validator.model import (
    Action,
    DcgmDiag,
    DcgmOutcome,
    DcgmTestResult,
    ErrorCounters,
    Finding,
    KernelFault,
    NodeResult,
    NvLinkErrorCounts,
    Report,
    Severity,
    Verdict,
    XidEvent,
    to_dict,
)
from validator.node.burnin.burn_config import BurnConfig
from validator.report.rma import (
    RMA_DIR,
    LastCertificate,
    evidence_digest,
    hardware_failures,
    host_of_file_name,
    rma_file_name,
    rma_files,
    write_rma,
)
from validator.service.certify_service import CertifyRequest, run_certify
from validator.store import Store

SAFE_NAME = re.compile(r"^[A-Za-z0-9._~-]+$")


@pytest.fixture(scope="module")
def remap_node() -> NodeResult:
    """The row-remap-pending scenario, burned briefly and judged: GPU 2 needs a reset."""
    facts = collect_simulated("row-remap-pending", burn=BurnConfig(duration_s=2.0))
    return judge_node(facts, Policy())


def _canonical_sha256(node: NodeResult) -> str:
    text = json.dumps(to_dict(node.facts), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def test_a_failing_scenario_gives_one_file_for_its_hardware_gpu(remap_node: NodeResult) -> None:
    assert remap_node.verdict is Verdict.NOT_CERTIFIED
    hardware = [
        f
        for f in remap_node.findings
        if f.severity is Severity.FAIL and f.action in (Action.RESET_GPU, Action.DRAIN_RMA)
    ]
    assert {f.gpu_index for f in hardware} == {2}
    (file,) = rma_files(remap_node)
    gpu = remap_node.facts.gpus[2]
    assert file.gpu_index == 2
    assert file.name == f"{remap_node.hostname}-gpu2-{gpu.serial}.txt"


def test_the_file_holds_every_field(remap_node: NodeResult) -> None:
    (file,) = rma_files(remap_node, generated="gpuready 9.9, generated 2026-01-01T12:00:00Z")
    text = file.text
    gpu = remap_node.facts.gpus[2]
    for label, value in (
        ("Host", remap_node.hostname),
        ("GPU index", "2"),
        ("Model", gpu.name),
        ("Serial", gpu.serial),
        ("UUID", gpu.uuid),
        ("PCI bus id", gpu.pci_bus_id),
        ("VBIOS", gpu.vbios_version),
        ("Driver", remap_node.facts.driver_version),
        ("Report", "gpuready 9.9, generated 2026-01-01T12:00:00Z"),
    ):
        assert re.search(rf"^{re.escape(label)}: +{re.escape(str(value))}$", text, re.M), label
    # The failing findings, each with its check, message, observed, expected and action.
    remap = next(
        f for f in remap_node.findings if f.check == "errors.row_remap" and f.gpu_index == 2
    )
    assert f"errors.row_remap  FAIL  -> reset the GPU ({remap.action_source})" in text
    assert f"   message:  {remap.message}" in text
    assert f"   observed: {remap.observed}" in text
    assert f"   expected: {remap.expected}" in text
    assert "   action:   reset_gpu" in text
    # Only this GPU's findings.
    assert "GPU 0 " not in text.split("Kernel log")[0].replace("GPU index", "")
    # Its Xid timeline: the Xid 63 on its bus, from the kernel log.
    xid_section = text.split("Xid events on this GPU:")[1].split("Kernel faults")[0]
    assert "Xid 63" in xid_section
    assert "0000:4c:00" in xid_section
    # Counters now, before and after the burn; PCIe replays and NVLink per link.
    assert re.search(r"^ +when collected +before the burn +after the burn$", text, re.M)
    assert re.search(r"^  Row remap pending +yes", text, re.M)
    assert re.search(r"^  PCIe replays +\d", text, re.M)
    assert re.search(r"^  NVLink 0 +\d+/\d+, \d+, \d+", text, re.M)
    # The burn record: speed, mismatches and telemetry spread.
    burn = text.split("\nBurn-in\n")[1]
    assert re.search(r"^TFLOPS: +\d", burn, re.M)
    assert re.search(r"^Mismatches: +0 elements in 0 iterations$", burn, re.M)
    assert re.search(r"^  power +min [\d.]+ W / median [\d.]+ W / max [\d.]+ W$", burn, re.M)
    assert re.search(r"^  GPU temperature +min .* / max .* C$", burn, re.M)
    assert re.search(r"^  SM clock +min .* MHz$", burn, re.M)
    assert "SIMULATED" in burn
    assert "No DCGM diagnostic was asked for or recorded." in text
    # Not certified: the evidence digest of the facts, as canonical JSON.
    digest = _canonical_sha256(remap_node)
    assert evidence_digest(remap_node.facts) == digest
    assert re.search(rf"^Digest: +not certified; evidence digest: sha256:{digest}$", text, re.M)


def test_a_certified_digest_is_used_where_the_node_has_one(remap_node: NodeResult) -> None:
    (file,) = rma_files(remap_node, certificate_digest="ab" * 32)
    assert f"certificate sha256:{'ab' * 32}" in file.text
    assert "evidence digest" not in file.text


def _with_findings(node: NodeResult, *findings: Finding) -> NodeResult:
    return dataclasses.replace(node, findings=findings, verdict=Verdict.NOT_CERTIFIED)


def _fail(check: str, gpu: int, action: Action) -> Finding:
    return Finding(check, Severity.FAIL, f"{check} failed", gpu_index=gpu, action=action)


def test_exactly_the_gpus_with_a_hardware_action_get_a_file() -> None:
    node = _with_findings(
        burn_node(),
        _fail("burn.correctness", 1, Action.DRAIN_RMA),
        _fail("versions.vbios", 1, Action.FIX_SOFTWARE),  # evidence beside the RMA one
        _fail("power.limit", 0, Action.FIX_SOFTWARE),  # software only: no file
        _fail("burn.status", 2, Action.REBOOT),  # a reboot is no hardware action
        Finding(
            "thermal.margin", Severity.WARN, "warm", gpu_index=2, action=Action.CHECK_COOLING_POWER
        ),
        Finding("pcie.width", Severity.UNKNOWN, "?", gpu_index=0, action=Action.RERUN),
        Finding("burn.cross_gpu", Severity.FAIL, "node-wide", action=Action.DRAIN_RMA),
    )
    assert list(hardware_failures(node)) == [1]
    (file,) = rma_files(node)
    assert file.gpu_index == 1
    assert "1. burn.correctness  FAIL  -> drain and RMA" in file.text
    assert "2. versions.vbios  FAIL  -> fix the software stack" in file.text
    assert "power.limit" not in file.text


def test_a_burn_records_counters_before_and_after_and_mismatches() -> None:
    node = burn_node()
    burn = node.facts.burn
    assert burn is not None
    before = ErrorCounters(
        ecc_volatile_uncorrected=0,
        pcie_replay_count=3,
        nvlink_errors=(NvLinkErrorCounts(0, 1, 0, 0, 0), NvLinkErrorCounts(1, 0, 0, 0, 0)),
    )
    after = dataclasses.replace(
        before,
        ecc_volatile_uncorrected=2,
        pcie_replay_count=190,
        nvlink_errors=(NvLinkErrorCounts(0, 450, 7, 2, 1), NvLinkErrorCounts(1, 0, 0, 0, 0)),
    )
    gpus = (
        burn.gpus[0],
        dataclasses.replace(burn.gpus[1], counters_before=before, counters_after=after),
        burn.gpus[2],
    )
    facts = dataclasses.replace(node.facts, burn=dataclasses.replace(burn, gpus=gpus))
    node = _with_findings(
        dataclasses.replace(node, facts=facts), _fail("burn.correctness", 1, Action.DRAIN_RMA)
    )
    (file,) = rma_files(node)
    text = file.text
    assert re.search(r"^  ECC uncorrected \(volatile\) +\S.* +0 +2$", text, re.M)
    assert re.search(r"^  PCIe replays +\S.* +3 +190$", text, re.M)
    assert re.search(r"^  NVLink 0 +- +1/0, 0, 0 +450/7, 2, 1$", text, re.M)
    assert "Mismatches:      37 elements in 2 iterations" in text
    assert "TFLOPS:          598.7" in text
    assert re.search(r"^  power +n/a \(not sampled\)$", text, re.M)  # GPU 1 had no power


def test_the_timeline_and_dcgm_name_only_this_gpu() -> None:
    node = burn_node()
    bus = "0000:19:00"  # GPU 1 of the samples is 00000000:19:00.0
    other = "0000:18:00"
    log = dataclasses.replace(
        node.facts.kernel_log,
        events=(
            XidEvent(79, bus, "GPU has fallen off the bus.", timestamp="2025-03-04T09:00:00Z"),
            XidEvent(13, other, "Graphics Exception", timestamp="2025-03-04T09:01:00Z"),
            XidEvent(20034, "0000:07:00", "Link down", uptime_s=12.5, nvswitch=True),
        ),
        faults=(
            KernelFault("rm_init_adapter_failed", bus, "RmInitAdapter failed! (0x22:0x56:742)"),
            KernelFault("gsp_timeout", other, "Timeout waiting for RPC from GSP!"),
        ),
    )
    dcgm = DcgmDiag(
        level=3,
        source="dcgmi diag -r 3 -j",
        version="4.2.3",
        results=(
            DcgmTestResult("memory", DcgmOutcome.FAIL, "hardware", 1, "DBE on GPU 1", 9),
            DcgmTestResult("memory", DcgmOutcome.PASS, "hardware", 0),
            DcgmTestResult("software", DcgmOutcome.PASS, "deployment", None),
        ),
    )
    facts = dataclasses.replace(node.facts, kernel_log=log, dcgm=dcgm)
    node = _with_findings(
        dataclasses.replace(node, facts=facts), _fail("dcgm.memory", 1, Action.DRAIN_RMA)
    )
    (file,) = rma_files(node)
    text = file.text
    assert "2025-03-04T09:00:00Z  Xid 79  0000:19:00  GPU has fallen off the bus." in text
    assert "Xid 13" not in text
    assert "rm_init_adapter_failed  0000:19:00  RmInitAdapter failed!" in text
    assert "gsp_timeout" not in text
    assert "[12.500000]  SXid 20034  0000:07:00  Link down" in text
    assert "level 3, DCGM 4.2.3, from dcgmi diag -r 3 -j" in text
    assert "  memory  fail  GPU 1 [hardware] DCGM_FR 9: DBE on GPU 1" in text
    assert "  software  pass  node [deployment]" in text
    assert "GPU 0 [hardware]" not in text


def test_a_healthy_node_gives_no_file_and_no_folder(tmp_path: Path) -> None:
    report = sample_report(healthy_node())
    assert rma_files(report.nodes[0]) == []
    assert write_rma(report, tmp_path) == []
    assert not (tmp_path / RMA_DIR).exists()


@pytest.mark.parametrize(
    "serial",
    [
        "../../etc/passwd",
        "a-b-c",
        "x\x00y\x1b[31m",
        "with space/and\\slash",
        "\u00e9t\u00e9\ud800",
        ".hidden",
        "_5F",
        "s" * 600,
        "",
    ],
)
def test_names_are_safe_for_hostile_serials(serial: str) -> None:
    name = rma_file_name("gpu-node-01", 3, serial)
    assert SAFE_NAME.match(name), name
    assert Path(name).name == name  # one path component: never a way out of rma/
    assert not name.startswith(".")
    assert len(name.encode()) <= 255
    assert host_of_file_name(name) == "gpu-node-01"


def test_names_are_one_to_one() -> None:
    triples = [
        ("a-gpu1", 2, "x"),
        ("a", 1, "gpu2-x"),
        ("a", 1, "gpu2_2Dx"),
        ("a-gpu1-gpu2", 3, "x"),
        ("a", 12, "x"),
        ("a", 1, "2-x"),
        ("gpu@01", 0, "s"),
        ("gpu_01", 0, "s"),
        ("h", 0, ""),
        ("h", 0, "_"),
        ("h", 0, "s" * 600),
        ("h", 0, "s" * 601),
    ]
    names = [rma_file_name(*triple) for triple in triples]
    assert len(set(names)) == len(names), names


def test_unknown_serial_still_names_the_file(remap_node: NodeResult) -> None:
    from validator.model import NOT_SUPPORTED

    assert rma_file_name("h", 4, NOT_SUPPORTED) == "h-gpu4-_.txt"


def _report(*nodes: NodeResult) -> Report:
    return Report(generated_at="2026-01-01T12:00:00Z", tool_version="0.1.0", nodes=nodes)


def test_write_rma_writes_atomically_and_replaces_this_hosts_stale_files(
    tmp_path: Path, remap_node: NodeResult
) -> None:
    folder = tmp_path / RMA_DIR
    folder.mkdir()
    stale = folder / rma_file_name(remap_node.hostname, 5, "OLD")  # a GPU since repaired
    other = folder / rma_file_name("another-host", 1, "KEEP")  # not in this report
    mine = folder / "notes.txt"  # not ours at all
    for path in (stale, other, mine):
        path.write_text("old\n")
    (written,) = write_rma(_report(remap_node), tmp_path)
    assert written.parent == folder
    assert written.read_text().startswith(f"gpuready RMA evidence: {remap_node.hostname} GPU 2")
    assert "gpuready 0.1.0, generated 2026-01-01T12:00:00Z" in written.read_text()
    assert not stale.exists()
    assert other.exists()
    assert mine.exists()
    assert sorted(p.name for p in folder.iterdir()) == sorted([written.name, other.name, mine.name])


def test_an_unwritable_folder_is_one_clear_error(tmp_path: Path, remap_node: NodeResult) -> None:
    (tmp_path / RMA_DIR).write_text("a file in the way\n")  # refused: never replaced
    with pytest.raises(UnsafePathError, match=r"rma is a regular file, not a folder"):
        write_rma(_report(remap_node), tmp_path)


def test_certify_with_a_report_dir_writes_the_pack(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("require_burn: false\n")
    out = tmp_path / "out"
    request = CertifyRequest(
        simulate="row-remap-pending", policy_path=str(policy), report_dir=str(out)
    )
    with Store.open(tmp_path / "h.db") as store:
        outcome = run_certify(request, store)
    assert outcome.problems == ()
    (file,) = (out / RMA_DIR).iterdir()
    assert re.fullmatch(r".+-gpu2-.+\.txt", file.name)
    assert outcome.written["rma"] == out / RMA_DIR
    assert "-> reset the GPU" in file.read_text()
    # The JSON report carries the same actions.
    document = json.loads((out / "report.json").read_text())
    actions = {f["action"] for f in document["nodes"][0]["findings"] if f["severity"] == "FAIL"}
    assert "reset_gpu" in actions


def test_the_digest_names_the_nodes_last_certificate_and_this_runs_evidence(
    remap_node: NodeResult,
) -> None:
    last = LastCertificate("2026-11-30T08:00:00Z", "cd" * 32)
    (file,) = rma_files(remap_node, last_certificate=last)
    evidence = _canonical_sha256(remap_node)
    line = (
        f"last certified 2026-11-30T08:00:00Z, certificate digest sha256:{'cd' * 32}; "
        f"this run: not certified; evidence digest: sha256:{evidence}"
    )
    assert re.search(rf"^Digest: +{re.escape(line)}$", file.text, re.M)


def test_certify_takes_the_last_certificate_from_history(tmp_path: Path) -> None:
    # The node was certified healthy, then a GPU needs a reset: its file names that
    # certificate (what the GPU was accepted as) and this run's evidence.
    policy = tmp_path / "policy.yaml"
    policy.write_text("require_burn: false\n")
    out = tmp_path / "out"
    with Store.open(tmp_path / "h.db") as store:
        healthy = run_certify(
            CertifyRequest(simulate="healthy-8x-h100-sxm", policy_path=str(policy)), store
        )
        broken = run_certify(
            CertifyRequest(
                simulate="row-remap-pending", policy_path=str(policy), report_dir=str(out)
            ),
            store,
        )
    (certificate,) = healthy.certificates.values()
    assert certificate.hostname == broken.report.nodes[0].hostname
    (file,) = (out / RMA_DIR).iterdir()
    evidence = evidence_digest(broken.report.nodes[0].facts)
    line = (
        f"last certified {certificate.issued_at}, certificate digest "
        f"sha256:{certificate.digest}; this run: not certified; evidence digest: sha256:{evidence}"
    )
    assert re.search(rf"^Digest: +{re.escape(line)}$", file.read_text(), re.M)


def test_a_node_never_certified_says_only_this_runs_evidence(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("require_burn: false\n")
    out = tmp_path / "out"
    request = CertifyRequest(
        simulate="row-remap-pending", policy_path=str(policy), report_dir=str(out)
    )
    with Store.open(tmp_path / "h.db") as store:
        run_certify(request, store)
    (file,) = (out / RMA_DIR).iterdir()
    assert re.search(r"^Digest: +not certified; evidence digest: sha256:[0-9a-f]{64}$",
                     file.read_text(), re.M)  # fmt: skip


def test_a_certified_run_writes_no_pack(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("require_burn: false\n")
    out = tmp_path / "out"
    request = CertifyRequest(
        simulate="healthy-8x-h100-sxm", policy_path=str(policy), report_dir=str(out)
    )
    with Store.open(tmp_path / "h.db") as store:
        outcome = run_certify(request, store)
    assert outcome.report.nodes[0].verdict is Verdict.CERTIFIED
    assert not (out / RMA_DIR).exists()
    assert "rma" not in outcome.written
