"""The host family's collector (validator.node.host_probe): parsers, live, capture, simulation."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.collecting import collect_capture, collect_simulated
from validator.judge import judge_node
from validator.judge.policy import policy_from_mapping
from validator.model import Action, HostFacts, Reason, Severity, StackVersion, Unavailable
from validator.node.capture.capture_replay import write_capture
from validator.node.host_probe import probe_host
from validator.node.parsers.base import ParseError
from validator.node.parsers.host_proc import (
    parse_cpuinfo,
    parse_df,
    parse_meminfo,
    parse_ofed_info,
    parse_package_versions,
    parse_sysctl,
    parse_systemctl_show,
)
from validator.node.sim.simulated_source import SimulatedSource
from validator.node.system import LiveSystem


def test_cpuinfo_counts_sockets_cores_and_threads() -> None:
    text = "".join(
        f"processor\t: {n}\nmodel name\t: Intel(R) Xeon(R) Platinum 8480C\n"
        f"physical id\t: {n % 2}\ncore id\t\t: {(n // 2) % 56}\n\n"
        for n in range(224)
    )
    cpu = parse_cpuinfo(text)
    assert (cpu.sockets, cpu.cores, cpu.threads) == (2, 112, 224)
    assert cpu.model == "Intel(R) Xeon(R) Platinum 8480C"
    with pytest.raises(ParseError):
        parse_cpuinfo("MemTotal: 1 kB\n")


def test_meminfo_df_systemctl_packages_and_ofed() -> None:
    assert parse_meminfo("MemTotal:  2113389036 kB\nSwapTotal:  0 kB\n")["MemTotal"] == 2113389036
    with pytest.raises(ParseError):
        parse_meminfo("nothing\n")
    df = parse_df(
        "Filesystem 1024-blocks Used Available Capacity Mounted on\n"
        "/dev/md1 30001587536 123 28377530747 1% /raid\n"
        "server:/home 100 50 50 50% /mnt/with space\n"
    )
    assert [(m.path, m.avail_kib) for m in df] == [("/raid", 28377530747), ("/mnt/with space", 50)]
    with pytest.raises(ParseError):
        parse_df("not df\n")
    units = parse_systemctl_show(
        "Id=nvidia-persistenced.service\nLoadState=loaded\nActiveState=active\n\n"
        "Id=nvidia-dcgm.service\nLoadState=not-found\nActiveState=inactive\n"
    )
    assert [(u.name, u.load, u.active) for u in units] == [
        ("nvidia-persistenced", "loaded", "active"),
        ("nvidia-dcgm", "not-found", "inactive"),
    ]
    packages = parse_package_versions(
        "libnccl2 2.23.4-1+cuda12.4 ii \nrdma-core 39.0-1 rc \n"
        "dpkg-query: no packages found matching libnccl\npackage libnccl is not installed\n"
        "nvidia-container-toolkit 1.19.1-1.x86_64\n"
    )
    assert packages == {
        "libnccl2": "2.23.4-1+cuda12.4",
        "nvidia-container-toolkit": "1.19.1-1.x86_64",
    }
    assert parse_ofed_info("MLNX_OFED_LINUX-23.10-1.1.9.0:\n") == "23.10-1.1.9.0"
    with pytest.raises(ParseError):
        parse_ofed_info("bash: ofed_info: command not found\n")


def test_the_live_host_is_read_for_real() -> None:
    """This machine's /proc, df, sysctl and smartctl, through the collector's own reads."""
    host = probe_host(LiveSystem())
    assert isinstance(host.cpu_threads, int)
    assert host.cpu_threads >= 1
    assert isinstance(host.memory_kib, int)
    assert host.memory_kib > 0
    assert not isinstance(host.mounts, Unavailable)
    assert "/" in {mount.path for mount in host.mounts}
    assert isinstance(host.cmdline, str)
    # NVMe: whatever this host has, each drive read or why not; never a guess.
    assert not isinstance(host.nvme, Unavailable)
    for drive in host.nvme:
        assert drive.name.startswith("nvme")


def test_the_live_collector_sets_the_host_and_the_judge_reads_it() -> None:
    """The whole road on this machine: collect(LiveSource) then the host checks."""
    from validator.judge.checks import host_health
    from validator.node.collect import INTERCONNECT_OFF, CollectRequest, collect
    from validator.node.live.live_source import LiveSource

    facts = collect(LiveSource(), CollectRequest(interconnect=INTERCONNECT_OFF))
    assert facts.host is not None
    assert isinstance(facts.host, HostFacts)
    assert isinstance(facts.host.cpu_cores, int)
    policy = policy_from_mapping({"host": {"cpu_cores": 1, "mounts": [{"path": "/"}]}}, "test")
    found = {f.check: f for f in host_health.check(facts, policy, None)}
    assert found["host.cpu"].severity is Severity.PASS
    assert found["host.mounts"].severity is Severity.PASS
    more = policy_from_mapping({"host": {"cpu_cores": 100_000}}, "test")
    [cpu] = [f for f in host_health.check(facts, more, None) if f.check == "host.cpu"]
    assert cpu.severity is Severity.FAIL


@pytest.mark.skipif(shutil.which("smartctl") is None, reason="smartmontools not installed")
def test_smartctl_runs_for_real_through_the_collector() -> None:
    """No such drive here: smartctl's own document says so, and it is no reading."""
    from validator.node.host_probe import _smart

    smart = _smart(LiveSystem(), "nvme97")
    assert isinstance(smart, Unavailable)
    assert smart.reason is Reason.ERROR
    assert "nvme97" in smart.detail


def test_a_capture_of_a_scenario_reads_back_the_same_host(tmp_path: Path) -> None:
    system = SimulatedSource("healthy-8x-h100-sxm").system()
    outcome = write_capture(tmp_path / "bundle", system)
    assert outcome["smartctl-nvme9.json"] == "written"
    assert outcome["smartctl-nvme10.json"].startswith("skipped")
    assert outcome["nvme-sysfs.txt"] == "written"
    captured = collect_capture(tmp_path / "bundle").host
    simulated = probe_host(system)
    assert captured == simulated
    # ofed_info is missing there (exit 127): the bundle records that as an empty file, so
    # MOFED reads back "not installed", not "not recorded".
    assert (tmp_path / "bundle" / "ofed_info.txt").read_text() == ""
    assert not isinstance(captured.versions, Unavailable)
    assert captured.versions[-1] == StackVersion("mofed", "ofed_info", "")


def test_a_capture_without_the_host_files_is_measured_not_passed(tmp_path: Path) -> None:
    system = SimulatedSource("healthy-8x-h100-sxm").system()
    write_capture(tmp_path / "bundle", system)
    for name in ("cpuinfo.txt", "nvme-sysfs.txt", "systemctl.txt"):
        (tmp_path / "bundle" / name).unlink()
    facts = collect_capture(tmp_path / "bundle")
    assert isinstance(facts.host, HostFacts)
    assert isinstance(facts.host.nvme, Unavailable)
    assert facts.host.nvme.reason is Reason.NOT_MEASURED
    stated = policy_from_mapping(
        {"require_burn": False, "host": {"cpu_cores": 112, "nvme_count": 10}}, "test"
    )
    result = judge_node(facts, stated)
    found = {f.check: f for f in result.findings if f.check.startswith("host.")}
    for check, name in (
        ("host.cpu", "cpuinfo.txt"),
        ("host.nvme_count", "nvme-sysfs.txt"),
        ("host.services", "systemctl.txt"),
    ):
        assert found[check].severity is Severity.UNKNOWN, check
        assert found[check].action is Action.MEASURE, check
        assert name in found[check].message, check
    assert found["host.services"].required  # the node has NVSwitches: the fabric manager


def test_every_source_collects_the_host() -> None:
    facts = collect_simulated("healthy-8x-a100-80gb", interconnect="off")
    assert facts.host is not None
    assert facts.host.cpu_cores == 128
    assert not isinstance(facts.host.nvme, Unavailable)
    assert len(facts.host.nvme) == 10


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "host"


def test_the_recorded_host_outputs_parse() -> None:
    """Real outputs of this project's build host (tests/fixtures/host/SOURCES.md)."""
    cpu = parse_cpuinfo((FIXTURES / "local-cpuinfo.txt").read_text())
    assert (cpu.sockets, cpu.cores, cpu.threads) == (1, 2, 2)
    assert cpu.model == "AMD EPYC"
    memory = parse_meminfo((FIXTURES / "local-meminfo.txt").read_text())
    assert (memory["MemTotal"], memory["SwapTotal"]) == (24683772, 0)
    mounts = parse_df((FIXTURES / "local-df-P-k.txt").read_text())
    assert [m.path for m in mounts] == ["/dev", "/dev/shm", "/", "/sys/fs/cgroup"]
    assert mounts[2].avail_kib == 74681140
    settings = parse_sysctl((FIXTURES / "local-sysctl.txt").read_text())
    assert [s.name for s in settings][:2] == ["vm.swappiness", "vm.zone_reclaim_mode"]
    assert settings[0].value == "60"
    packages = parse_package_versions((FIXTURES / "local-dpkg-query.txt").read_text())
    assert packages == {"pciutils": "1:3.9.0-4", "smartmontools": "7.3-1+b1"}
