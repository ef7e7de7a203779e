"""A bundle is a System replayed into the one collector: capture, live and simulated agree.

Texts come from the real corpus in ../shared/captures, read in place. The corpus
holds no recorded ``journalctl -k`` and no ``rpm -qa`` listing: the journal is
given the corpus's real Xid log lines (as journald keeps the kernel's messages),
and the rpm listing is written here with NVIDIA's real package names.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.collecting import collect_capture, collect_simulated
from validator.error_tree import CaptureError
from validator.judge.policy import Policy
from validator.judge.verdict import judge_node
from validator.model import Finding, NodeFacts, Reason, Severity, Unavailable
from validator.node import system_facts
from validator.node.capture.capture_replay import CaptureSystem, write_capture
from validator.node.network_probe import with_network
from validator.node.parsers.ib_sysfs import parse_tree
from validator.node.parsers.kernel_log import parse_xid_events
from validator.node.sim.scenario import builtin_names, load_scenario
from validator.node.system import NotRecordedError

CAPTURED_AT = "2025-01-21T12:00:00+00:00"
UPTIME_S = 6781800.25  # the raw dmesg log's stamps (6781741 s) fall within the hour before
PROC_VERSION = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  565.57.01  Thu Oct 10 12:29:05 UTC 2024\n"
    "GCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04) \n"
)
OS_RELEASE = 'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\n'
KERNEL = "5.15.0-112-generic\n"
# Two H100s, one NVSwitch, two host devices: as sysfs lists them, and as lspci -n prints them.
PCI = (
    ("0000:00:00.0", "0x8086", "0x060000", "0600", "8086:09a2"),
    ("0000:18:00.0", "0x10de", "0x030200", "0302", "10de:2330 (rev a1)"),
    ("0000:2a:00.0", "0x10de", "0x030200", "0302", "10de:2330 (rev a1)"),
    ("0000:3a:00.0", "0x10de", "0x030200", "0302", "10de:2330 (rev a1)"),
    ("0000:5d:00.0", "0x10de", "0x030200", "0302", "10de:2330 (rev a1)"),
    ("0000:9a:00.0", "0x10de", "0x030200", "0302", "10de:2330 (rev a1)"),
    ("0000:ab:00.0", "0x10de", "0x030200", "0302", "10de:2330 (rev a1)"),
    ("0000:ba:00.0", "0x10de", "0x030200", "0302", "10de:2330 (rev a1)"),
    ("0000:db:00.0", "0x10de", "0x030200", "0302", "10de:2330 (rev a1)"),
    ("0000:05:00.0", "0x10de", "0x068000", "0680", "10de:22a3 (rev a1)"),
    ("0000:00:1f.0", "0x8086", "0x060100", "0601", "8086:1b81"),
)
PCI_DEVICES = "".join(f"{address} {vendor} {cls}\n" for address, vendor, cls, _, _ in PCI)
LSPCI = "".join(f"{address} {cls}: {ids}\n" for address, _, _, cls, ids in PCI)
# rpm -qa on a RHEL host with NVIDIA's CUDA repository (the corpus has no rpm listing).
RPM_QA = (
    "kernel-5.14.0-427.13.1.el9_4.x86_64\n"
    "libcudnn9-cuda-12-9.6.0.74-1.x86_64\n"
    "libcudnn9-devel-cuda-12-9.6.0.74-1.x86_64\n"
    "cudnn9-cuda-12-6-9.6.0.74-1.x86_64\n"
)
JOURNAL_ARGV = " ".join(system_facts.JOURNAL_KERNEL)
DPKG_ARGV = " ".join(system_facts.DPKG_CUDNN)
RPM_ARGV = " ".join(system_facts.RPM_CUDNN)
# Two NDR ports of an H100 node's /sys/class/infiniband, as the bundle records them.
IB_TREE = (
    Path(__file__).resolve().parent.parent / "fixtures/infiniband-sysfs/h100-two-ndr-ports.txt"
).read_text(encoding="utf-8")


def corpus(captures_dir: Path, name: str) -> str:
    return (captures_dir / name).read_text(encoding="utf-8")


def write_bundle(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")
    return directory


def meta(**locations: str) -> str:
    data: dict[str, Any] = {
        "hostname": "h100-node-07",
        "captured_at": CAPTURED_AT,
        "uptime_s": UPTIME_S,
        "locations": locations,
    }
    return json.dumps(data)


def without_origin(facts: NodeFacts) -> NodeFacts:
    return dataclasses.replace(facts, source="", source_detail="", collected_at="")


# ---------------------------------------------------------------- journalctl and rpm fall-backs


def test_journal_stands_in_for_a_missing_dmesg(tmp_path: Path, captures_dir: Path) -> None:
    log = corpus(captures_dir, "xid/gpud-dmesg-iso-xid13-sm-exceptions.log")
    directory = write_bundle(tmp_path / "bundle", {"journalctl.txt": log, "meta.json": meta()})
    kernel_log = collect_capture(directory).kernel_log
    assert kernel_log.source == "journalctl"
    assert not isinstance(kernel_log.events, Unavailable)
    assert [event.xid for event in kernel_log.events] == [13] * len(kernel_log.events)
    assert kernel_log.events == parse_xid_events(log)

    # The live collector, on a host whose dmesg refuses and whose journal holds the same text.
    scenario = tmp_path / "journal-only.json"
    scenario.write_text(
        json.dumps(
            {
                "name": "journal-only",
                "now": CAPTURED_AT,
                "commands": {
                    "dmesg": {"rc": 1, "stderr": "dmesg: read kernel buffer failed"},
                    JOURNAL_ARGV: {"stdout": log},
                },
            }
        )
    )
    live = system_facts.kernel_log_facts(load_scenario(str(scenario)).system(), 24.0)
    assert live == kernel_log


def test_journal_stands_in_for_an_empty_dmesg(tmp_path: Path, captures_dir: Path) -> None:
    log = corpus(captures_dir, "xid/gpud-xid79-sxid20034-nvswitch.log")
    directory = write_bundle(
        tmp_path / "bundle", {"dmesg.txt": "\n", "journalctl.txt": log, "meta.json": meta()}
    )
    kernel_log = collect_capture(directory).kernel_log
    assert kernel_log.source == "journalctl"
    assert not isinstance(kernel_log.events, Unavailable)
    assert {event.xid for event in kernel_log.events} == {79, 20034}


def test_neither_log_recorded_is_not_measured(tmp_path: Path) -> None:
    directory = write_bundle(tmp_path / "bundle", {"nvidia-smi.txt": "No devices were found\n"})
    events = collect_capture(directory).kernel_log.events
    assert events == Unavailable(Reason.NOT_MEASURED, "dmesg.txt not in the capture")


def test_empty_journal_is_not_a_clean_log_either(tmp_path: Path) -> None:
    directory = write_bundle(tmp_path / "bundle", {"journalctl.txt": "-- No entries --\n"})
    events = collect_capture(directory).kernel_log.events
    assert isinstance(events, Unavailable)
    assert events.reason is Reason.ERROR
    assert "journalctl.txt shows no log line" in events.detail
    assert "dmesg.txt not in the capture" in events.detail


def test_rpm_listing_gives_cudnn(tmp_path: Path) -> None:
    directory = write_bundle(tmp_path / "bundle", {"rpm-qa.txt": RPM_QA})
    tools = collect_capture(directory).tools
    assert tools.cudnn_version == "9.6.0"
    assert tools.cudnn_source == "package (rpm)"
    assert tools.cudnn_cuda_major == 12


def test_header_wins_and_rpm_tells_the_cuda_major(tmp_path: Path, captures_dir: Path) -> None:
    header = corpus(captures_dir, "cudnn/repo-zspace-cuda12.6-cudnn_version.h-9.6.0.txt")
    directory = write_bundle(tmp_path / "bundle", {"cudnn_version.h": header, "rpm-qa.txt": RPM_QA})
    tools = collect_capture(directory).tools
    assert tools.cudnn_version == "9.6.0"
    assert tools.cudnn_source == "cudnn_version.h"  # no recorded location: the bundle's name
    assert tools.cudnn_cuda_major == 12


def test_no_package_listing_recorded_is_not_measured(tmp_path: Path, captures_dir: Path) -> None:
    header = corpus(captures_dir, "cudnn/repo-zspace-cuda12.6-cudnn_version.h-9.6.0.txt")
    directory = write_bundle(tmp_path / "bundle", {"cudnn_version.h": header})
    major = collect_capture(directory).tools.cudnn_cuda_major
    assert major == Unavailable(Reason.NOT_MEASURED, "cudnn-packages.txt not in the capture")


# ---------------------------------------------------------------- what a bundle lacks


def test_every_fact_a_bundle_lacks_is_not_measured(tmp_path: Path, captures_dir: Path) -> None:
    banner = corpus(captures_dir, "nvidia-smi-banner/gls-H100SXMx8-565.57.01.txt")
    facts = collect_capture(write_bundle(tmp_path / "bundle", {"nvidia-smi.txt": banner}))
    lacking = {
        "os-release.txt": facts.os_name,
        "uname-r.txt": facts.kernel,
        "proc-driver-version.txt": facts.kernel_module_version,
        "lspci-n.txt": facts.pci_gpu_count,
        "nvcc.txt": facts.tools.nvcc_version,
        "cudnn_version.h": facts.tools.cudnn_version,
        "cudnn-packages.txt": facts.tools.cudnn_cuda_major,
        "dmesg.txt": facts.kernel_log.events,
    }
    for name, value in lacking.items():
        assert value == Unavailable(Reason.NOT_MEASURED, f"{name} not in the capture"), name
    assert facts.pci_nvswitch_count == facts.pci_gpu_count
    assert facts.tools.nvcc_path is None
    assert facts.tools.cudnn_source is None
    assert facts.collected_at == ""
    assert facts.kernel_log.window_hours is None  # no capture time: no window to place


def test_capture_system_says_what_it_has_no_record_of(tmp_path: Path) -> None:
    system = CaptureSystem(write_bundle(tmp_path / "bundle", {"dmesg.txt": "[1.0] hello\n"}))
    assert system.run(("dmesg",)).stdout == "[1.0] hello\n"
    assert system.run(("/usr/bin/dmesg",)).recorded_in == "dmesg.txt"
    with pytest.raises(NotRecordedError, match=r"journalctl\.txt not in the capture"):
        system.run(system_facts.JOURNAL_KERNEL)
    with pytest.raises(NotRecordedError, match=r"nvcc\.txt not in the capture"):
        system.which("nvcc")
    with pytest.raises(NotRecordedError, match=r"os-release\.txt not in the capture"):
        system.read_text("/etc/os-release")
    with pytest.raises(NotRecordedError, match="not in the capture"):
        system.run(("ls", "/"))


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("nvcc.txt", "command not found\n", r"nvcc\.txt: .*capture it again or remove the file"),
        ("cudnn_version.h", "#define CUDNN_MAJOR 9\n", r"cudnn_version\.h: .*CUDNN_MINOR"),
        ("proc-driver-version.txt", "garbage\n", r"proc-driver-version\.txt: "),
        ("meta.json", "{", r"meta\.json: not valid JSON"),
    ],
)
def test_a_broken_file_is_bad_input(tmp_path: Path, name: str, text: str, message: str) -> None:
    directory = write_bundle(tmp_path / "bundle", {name: text})
    with pytest.raises(CaptureError, match=message):
        collect_capture(directory)


# ---------------------------------------------------------------- capture == scenario


def bundle_texts(captures_dir: Path) -> dict[str, str]:
    """A complete bundle of real outputs (an 8x H100 node's nvidia-smi, the corpus's logs)."""
    return {
        "nvidia-smi-q.txt": corpus(captures_dir, "nvidia-smi-q/gls-H100SXMx8-565.57.01.txt"),
        "nvidia-smi.txt": corpus(captures_dir, "nvidia-smi-banner/gls-H100SXMx8-565.57.01.txt"),
        "nvcc.txt": corpus(captures_dir, "nvcc/repo-ngc-test-nvcc-11.6.55.txt"),
        "cudnn_version.h": corpus(
            captures_dir, "cudnn/repo-zspace-cuda12.6-cudnn_version.h-9.6.0.txt"
        ),
        "cudnn-packages.txt": corpus(
            captures_dir, "cudnn/repo-ngc-test-dpkg-l-grep-cudnn-8.3.2.txt"
        ),
        "rpm-qa.txt": RPM_QA,
        "dmesg.txt": corpus(captures_dir, "xid/gpud-xid79-sxid20034-nvswitch.log"),
        "journalctl.txt": corpus(captures_dir, "xid/gpud-dmesg-iso-xid13-sm-exceptions.log"),
        "proc-driver-version.txt": PROC_VERSION,
        "os-release.txt": OS_RELEASE,
        "uname-r.txt": KERNEL,
        "pci-devices.txt": PCI_DEVICES,
        "infiniband-sysfs.txt": IB_TREE,
    }


def scenario_for(texts: dict[str, str], header_at: str) -> dict[str, Any]:
    """The same texts as a scenario's host: its files and commands, keyed as a person would."""
    commands = {
        "nvidia-smi": "nvidia-smi.txt",
        "nvcc --version": "nvcc.txt",
        DPKG_ARGV: "cudnn-packages.txt",
        RPM_ARGV: "rpm-qa.txt",
        "dmesg": "dmesg.txt",
        JOURNAL_ARGV: "journalctl.txt",
    }
    files = {
        header_at: "cudnn_version.h",
        "/proc/driver/nvidia/version": "proc-driver-version.txt",
        "/etc/os-release": "os-release.txt",
        "/proc/sys/kernel/osrelease": "uname-r.txt",
    }
    sysfs: dict[str, str] = {}
    if "pci-devices.txt" in texts or "lspci-n.txt" in texts:
        for address, vendor, device_class, _, _ in PCI:
            sysfs[f"/sys/bus/pci/devices/{address}/vendor"] = f"{vendor}\n"
            sysfs[f"/sys/bus/pci/devices/{address}/class"] = f"{device_class}\n"
    if "infiniband-sysfs.txt" in texts:
        sysfs.update(parse_tree(texts["infiniband-sysfs.txt"]))
    return {
        "name": "same-texts",
        "now": CAPTURED_AT,
        "host": {"hostname": "h100-node-07", "uptime_s": UPTIME_S},
        "commands": {
            line: {"stdout": texts[name]} for line, name in commands.items() if name in texts
        },
        "files": {
            **{path: texts[name] for path, name in files.items() if name in texts},
            **sysfs,
        },
    }


VARIANTS: dict[str, dict[str, str | None]] = {
    "complete": {},
    "journal, no dmesg": {"dmesg.txt": None},
    "journal, empty dmesg": {"dmesg.txt": ""},
    "packages, no header": {"cudnn_version.h": None},
    "rpm, no header nor dpkg": {"cudnn_version.h": None, "cudnn-packages.txt": None},
    "lspci, not sysfs": {"pci-devices.txt": None, "lspci-n.txt": LSPCI},
    "debian header path": {"header_at": "/usr/include/x86_64-linux-gnu/cudnn_version_v9.h"},
    "cuda toolkit header": {"header_at": "/usr/local/cuda-12.6/include/cudnn_version.h"},
}


@pytest.mark.parametrize("variant", list(VARIANTS), ids=list(VARIANTS))
def test_capture_and_scenario_with_the_same_texts_agree(
    tmp_path: Path, captures_dir: Path, variant: str
) -> None:
    changes = dict(VARIANTS[variant])
    header_at = changes.pop("header_at", None) or "/usr/include/cudnn_version.h"
    texts = bundle_texts(captures_dir)
    for name, text in changes.items():
        if text is None:
            texts.pop(name)
        else:
            texts[name] = text
    locations = {"nvcc.txt": "/usr/local/cuda/bin/nvcc", "cudnn_version.h": header_at}
    directory = write_bundle(tmp_path / "bundle", {**texts, "meta.json": meta(**locations)})
    scenario_file = tmp_path / "same-texts.json"
    scenario_file.write_text(json.dumps(scenario_for(texts, header_at)))

    captured = collect_capture(directory)
    reading = CaptureSystem(directory).reading  # NVML's part: the bundle's query, both sides
    host = load_scenario(str(scenario_file)).system()
    simulated = with_network(host, system_facts.system_facts(host, reading, source="simulate"))
    # These bundles hold none of the GPUDirect files (issue 34): the capture says which
    # file is missing; system_facts alone does not collect the family. Compared apart.
    assert captured.gpudirect is not None
    assert captured.gpudirect.acs_ports == Unavailable(
        Reason.NOT_MEASURED, "lspci-vvv.txt not in the capture"
    )
    captured = dataclasses.replace(captured, gpudirect=None)

    # The host family is read by the collector after system_facts (and these texts hold none
    # of its files); its round trip is tests/node/test_host_probe.py's.
    assert captured.host is not None
    captured = dataclasses.replace(captured, host=None)
    # The container facts are the collector's (validator.node.collect), not system_facts':
    # these bundles hold no nvidia-ctk file, so they are not measured, never "absent".
    container = captured.container
    assert container is not None
    assert isinstance(container.toolkit_version, Unavailable)
    assert container.toolkit_version.reason is Reason.NOT_MEASURED
    captured = dataclasses.replace(captured, container=None)
    assert without_origin(captured) == without_origin(simulated)
    assert captured.collected_at == CAPTURED_AT
    # Not vacuous: every host fact was measured, through the fall-backs where the variant asks.
    for value in (
        captured.os_name,
        captured.kernel,
        captured.kernel_module_version,
        captured.pci_gpu_count,
        captured.tools.nvcc_version,
        captured.tools.cudnn_version,
        captured.tools.cudnn_cuda_major,
        captured.kernel_log.events,
    ):
        assert not isinstance(value, Unavailable), value
    assert (captured.pci_gpu_count, captured.pci_nvswitch_count) == (8, 1)
    network = captured.network
    assert network is not None
    assert not isinstance(network.hcas, Unavailable)
    assert [hca.device for hca in network.hcas] == ["mlx5_0", "mlx5_1"]
    assert captured.kernel_log.source == ("dmesg" if texts.get("dmesg.txt") else "journalctl")
    # Judged the same, finding for finding, but for the check only a bundle's several
    # views can have: that they agree.
    policy = Policy(require_burn=False)
    # (The host family aside, as above: these texts hold none of its files.)
    captured_findings = judge_node(dataclasses.replace(captured, host=None), policy).findings
    agree = [f for f in captured_findings if f.check == "inventory.sources_agree"]
    assert [f.severity for f in agree] == [Severity.PASS]
    # The advice alone may differ: what a capture lacks is captured, what a host lacks
    # is measured (validator.judge.checks.advice).
    assert [
        _judged(f) for f in captured_findings if f.check != "inventory.sources_agree"
    ] == [_judged(f) for f in judge_node(simulated, policy).findings]


def _judged(finding: Finding) -> tuple[object, ...]:
    """A finding's judgement, without the advice that depends on where the facts came from."""
    advice = re.compile(r"; (capture \S+ on the host|a capture holds no burn-in): .*$")
    return (
        finding.check,
        finding.severity,
        advice.sub("", finding.message),
        finding.gpu_index,
        finding.observed,
        finding.expected,
        finding.required,
    )


# ---------------------------------------------------------------- capture, then certify --capture

# What NVML says on a scenario and what its nvidia-smi printed are different readings.
NVML_STAND_IN = ("gpus", "nvml_status", "nvml_detail", "driver_version", "cuda_driver_version")
# What the busy gate reads before a burn (Slurm's other jobs) is no fact a bundle keeps:
# a capture burns nothing, so it never asks.
NVML_STAND_IN += ("slurm_jobs",)


def host_facts(facts: NodeFacts) -> NodeFacts:
    stand_in = {name: getattr(NodeFacts(hostname="", source=""), name) for name in NVML_STAND_IN}
    return without_origin(dataclasses.replace(facts, **stand_in))


@pytest.mark.parametrize("name", builtin_names())
def test_round_trip_never_invents_a_fact(tmp_path: Path, name: str) -> None:
    scenario = load_scenario(name)
    outcome = write_capture(tmp_path / "bundle", scenario.system())
    assert outcome["meta.json"] == "written"
    assert not list((tmp_path / "bundle").glob(".*.tmp"))
    captured = host_facts(collect_capture(tmp_path / "bundle"))
    simulated = host_facts(collect_simulated(name))
    if captured == simulated:
        return
    # Where the bundle could not hold a fact (the scenario's host lacked it), it is not measured.
    for field in ("os_name", "kernel", "kernel_module_version", "pci_gpu_count"):
        mine, theirs = getattr(captured, field), getattr(simulated, field)
        assert mine == theirs or (isinstance(mine, Unavailable) and isinstance(theirs, Unavailable))
    for field in ("nvcc_version", "cudnn_version", "cudnn_cuda_major"):
        mine, theirs = getattr(captured.tools, field), getattr(simulated.tools, field)
        if mine != theirs:
            assert isinstance(mine, Unavailable), (field, mine)
            assert mine.reason is Reason.NOT_MEASURED, (field, mine)
            assert isinstance(theirs, Unavailable), (field, theirs)
    assert captured.kernel_log == simulated.kernel_log


@pytest.mark.parametrize("name", ["healthy-8x-h100-sxm", "row-remap-pending", "nvcc-off-pin"])
def test_capture_then_certify_capture_gives_the_scenarios_facts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    from validator.cli.main import main
    from validator.report.json_report import load_report_json

    directory = tmp_path / "bundle"
    assert main(["capture", "--simulate", name, str(directory)]) == 0
    assert "files written to" in capsys.readouterr().out
    main(["certify", "--capture", str(directory), "--json"])
    facts = load_report_json(capsys.readouterr().out).nodes[0].facts
    assert facts.source == "capture"
    assert facts.source_detail == str(directory)
    simulated = collect_simulated(name, interconnect="off")  # a bundle holds no measurement
    assert host_facts(facts) == host_facts(simulated)
    assert facts.collected_at == simulated.collected_at
    # The banner a scenario prints agrees with its NVML on the versions.
    assert (facts.driver_version, facts.cuda_driver_version) == (
        simulated.driver_version,
        simulated.cuda_driver_version,
    )


def test_a_bundle_recaptured_is_the_same_bundle(tmp_path: Path, captures_dir: Path) -> None:
    texts = bundle_texts(captures_dir)
    first = write_bundle(tmp_path / "first", {**texts, "meta.json": meta()})
    outcome = write_capture(tmp_path / "second", CaptureSystem(first))
    assert {name for name, what in outcome.items() if what == "written"} >= set(texts)
    assert without_origin(collect_capture(tmp_path / "second")) == without_origin(
        collect_capture(first)
    )


def test_capture_writes_atomically_with_the_shared_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import validator.node.capture.capture_replay as capture_module
    from validator.files import write_atomic as real

    written: list[str] = []

    def spy(path: Path, data: str | bytes, *, mode: int = 0o644, **where: Path) -> Path:
        written.append(Path(path).name)
        return real(path, data, mode=mode, **where)

    monkeypatch.setattr(capture_module, "write_atomic", spy)
    outcome = write_capture(tmp_path / "bundle", load_scenario("healthy-8x-h100-sxm").system())
    assert sorted(written) == sorted(name for name, what in outcome.items() if what == "written")
    meta_json = json.loads((tmp_path / "bundle" / "meta.json").read_text())
    assert meta_json["locations"] == {
        "nvcc.txt": "/usr/local/cuda/bin/nvcc",
        "cudnn_version.h": "/usr/include/cudnn_version.h",
    }


def test_unwritable_folder_is_bad_input(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("")
    with pytest.raises(CaptureError, match="cannot create"):
        write_capture(target / "bundle", load_scenario("healthy-8x-h100-sxm").system())
