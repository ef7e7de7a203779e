"""GPUDirect facts through a capture bundle: written by ``gpuready capture``, read back.

The bundle is written from the healthy H100 scenario's System (as ``gpuready capture``
asks any System); its GPUDirect files then hold the scenario's outputs, shaped on real
ones. A bundle without them is "not measured", and the finding names the file to capture.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.collecting import collect_capture
from validator.judge import Policy, judge_node
from validator.model import Action, IommuFacts, Reason, Severity, Unavailable
from validator.node.capture.capture_replay import write_capture
from validator.node.sim.scenario import load_scenario

GPUDIRECT_FILES = (
    "nvidia-smi-topo.txt",
    "lspci-vvv.txt",
    "proc-modules.txt",
    "proc-cmdline.txt",
    "systemd-detect-virt.txt",
    "iommu-sysfs.txt",
)


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    outcome = write_capture(tmp_path / "b", load_scenario("healthy-8x-h100-sxm").system())
    assert {name: outcome[name] for name in GPUDIRECT_FILES} == dict.fromkeys(
        GPUDIRECT_FILES, "written"
    )
    return tmp_path / "b"


def test_capture_records_and_reads_back_the_gpudirect_facts(bundle: Path) -> None:
    direct = collect_capture(bundle).gpudirect
    assert direct is not None
    assert direct.rdma_stack is True
    assert direct.peermem_loaded is True
    assert direct.virtualized is False
    assert not isinstance(direct.topology, Unavailable)
    assert [link.link for link in direct.topology.links] == ["PIX"] * 8
    assert not isinstance(direct.acs_ports, Unavailable)
    assert len(direct.acs_ports) == 24
    assert direct.iommu == IommuFacts(
        mode="passthrough",
        group_types=("identity",),
        units=2,
        cmdline=("intel_iommu=on", "iommu=pt"),
    )


def test_an_iommu_recorded_empty_is_off_not_unmeasured(bundle: Path) -> None:
    (bundle / "iommu-sysfs.txt").write_text("")
    direct = collect_capture(bundle).gpudirect
    assert direct is not None
    assert isinstance(direct.iommu, IommuFacts)
    assert direct.iommu.mode == "off"


def test_a_bundle_without_the_files_is_unknown_and_names_them(bundle: Path) -> None:
    for name in GPUDIRECT_FILES:
        (bundle / name).unlink()
    facts = collect_capture(bundle)
    direct = facts.gpudirect
    assert direct is not None  # collected: each part says why it is missing
    assert isinstance(direct.acs_ports, Unavailable)
    assert direct.acs_ports.reason is Reason.NOT_MEASURED
    findings = {
        f.check: f for f in judge_node(facts, Policy()).findings if f.check.startswith("gpudirect.")
    }
    for check, name in (
        ("gpudirect.acs", "lspci-vvv.txt"),
        ("gpudirect.nic_affinity", "nvidia-smi-topo.txt"),
        ("gpudirect.peermem", "proc-modules.txt"),
    ):
        finding = findings[check]
        assert finding.severity is Severity.UNKNOWN
        assert finding.required
        assert finding.action is Action.MEASURE
        assert name in finding.message
    assert findings["gpudirect.iommu"].severity is Severity.UNKNOWN
    assert not findings["gpudirect.iommu"].required


def test_the_facts_survive_the_agents_json(bundle: Path) -> None:
    # An agent on a host sends its facts as JSON: the family decodes to the same facts.
    from validator.model import NodeFacts, from_dict, to_dict

    facts = collect_capture(bundle)
    assert from_dict(NodeFacts, to_dict(facts)) == facts
