"""NVLink: the nvlink -s / -e parsers on real outputs, bundles carrying them, and the checks.

Real outputs: ../shared/captures/nvidia-smi-nvlink/ (read in place) and
tests/fixtures/nvidia-smi-nvlink/ (see its SOURCES.md); each is read with the figures
its SOURCES row expects. Hand-made texts follow the same real layout.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from tests.collecting import collect_capture
from tests.judge.test_judge_healthy import healthy_node, with_gpu
from validator.cli.main import main
from validator.error_tree import CaptureError, ExitCode
from validator.judge import Policy, load_catalog
from validator.judge.actions import RULES
from validator.judge.catalog import Sku
from validator.judge.checks import nvlink
from validator.model import (
    Action,
    BurnStatus,
    ErrorCounters,
    Finding,
    GpuFacts,
    Measured,
    NodeFacts,
    NvLinkErrorCounts,
    NvLinkState,
    Reason,
    Severity,
    Unavailable,
)
from validator.node.capture.capture_replay import CaptureSystem
from validator.node.parsers.base import ParseError
from validator.node.parsers.nvlink_smi import (
    NvLinkGpu,
    parse_nvlink_errors,
    parse_nvlink_status,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "nvidia-smi-nvlink"
GB200_S = (
    "nvidia-smi-nvlink/issue-k8stestinfra371-gb200-nvlink-s-18links-53.125GBps-ELIDED-BY-USER.txt"
)
GB200_INFO = "nvidia-smi-nvlink/issue-k8stestinfra371-gb200-nvlink-info-firmware-TRUNCATED.txt"
A100_S = (
    "nvidia-smi-nvlink/repo-Azure-azurehpc-health-checks-a100-sxm4-80gb-nvlink-s-12links-25GBps-"
    "pass.txt"
)
INACTIVE = "repo-Azure-azurehpc-health-checks-a100-sxm4-80gb-nvlink-s-all-links-inactive.txt"
A100_40_S = "WEAKPROV-codeidx-60859828466-a100-sxm4-40gb-535.161.08-nvlink-s-12links-25GBps.txt"
A100_40_E = "WEAKPROV-codeidx-60859828466-8xa100-sxm4-40gb-535.161.08-nvlink-e-12links-zero.txt"
H100_S = "repo-stas00-ml-engineering-h100-80gb-hbm3-nvlink-s-26.562GBps-ELIDED-UUID-ANONYMISED.txt"
H100_E = "repo-stas00-ml-engineering-h100-80gb-hbm3-nvlink-e-ELIDED-UUID-ANONYMISED.txt"
V100_S = "issue-azhpcdiagnostics73-v100-sxm2-32gb-nvlink-s-links-3-5-inactive-ELIDED.txt"
A100_40_UUIDS = (
    "GPU-fde0a018-ad1a-bbec-ccf6-50a9f64bd178",
    "GPU-264fc0d9-c23f-c1eb-4fc3-40237af3cebc",
    "GPU-0cc8109e-9c4f-eb6f-9379-df66f71f032c",
    "GPU-46a33459-81fa-9dcf-9ed9-9a9425a4abf5",
    "GPU-578ff5a4-ba53-9afa-62a7-0f5fa921b3b7",
    "GPU-a049b8b0-031a-a816-36af-036fbb15fa9b",
    "GPU-36aca86d-d88e-2763-af0f-7844243707f4",
    "GPU-63a54e17-d900-3b99-c42a-4506beaaa446",
)
# The 4x A100-SXM4-80GB capture's UUIDs (nvidia-smi-q/gls-A100SXMx4-555.42.02.txt).
A100X4_Q = "nvidia-smi-q/gls-A100SXMx4-555.42.02.txt"
A100X4_UUIDS = (
    "GPU-31515c3d-1414-7c2c-004a-f86a898946ac",
    "GPU-72d87681-01db-370e-567d-41afcf20fad0",
    "GPU-62989189-9e1e-ac75-4676-114f14998542",
    "GPU-011b2cfe-2b8e-1cb0-19e1-1b764e854dfc",
)
FAIL, PASS, UNKNOWN = Severity.FAIL, Severity.PASS, Severity.UNKNOWN


def pre_counters_node() -> NodeFacts:
    """The healthy node as facts read before issue 13 had it: link speeds and NVLink
    and PCIe counters not read."""
    facts = healthy_node()
    assert facts.burn is not None
    old = ErrorCounters()
    gpus = tuple(
        dataclasses.replace(
            gpu,
            nvlinks=tuple(NvLinkState(link.link, link.active) for link in gpu.nvlinks)
            if isinstance(gpu.nvlinks, tuple)
            else gpu.nvlinks,
        )
        for gpu in facts.gpus
    )
    burns = tuple(
        dataclasses.replace(
            burn,
            counters_before=dataclasses.replace(
                burn.counters_before,
                pcie_replay_count=old.pcie_replay_count,
                nvlink_errors=old.nvlink_errors,
            ),
            counters_after=dataclasses.replace(
                burn.counters_after,
                pcie_replay_count=old.pcie_replay_count,
                nvlink_errors=old.nvlink_errors,
            ),
        )
        for burn in facts.burn.gpus
    )
    return dataclasses.replace(facts, gpus=gpus, burn=dataclasses.replace(facts.burn, gpus=burns))


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def links_of(gpu: NvLinkGpu) -> tuple[NvLinkState, ...]:
    assert isinstance(gpu.links, tuple), gpu.links
    return gpu.links


# ---------------------------------------------------------------- nvlink -s on real outputs


def test_gb200_capture_gpu0_has_18_links_and_the_elided_gpu1_is_not_measured(
    captures_dir: Path,
) -> None:
    report = parse_nvlink_status((captures_dir / GB200_S).read_text(encoding="utf-8"))
    assert report.error is None
    assert [gpu.index for gpu in report.gpus] == [0, 1]
    first, second = report.gpus
    assert (first.name, first.uuid) == ("NVIDIA GB200", "GPU-d1b93026-6d5b-03bd-3a71-f85b47a61bde")
    assert [(s.link, s.active, s.speed_gb_s) for s in links_of(first)] == [
        (i, True, 53.125) for i in range(18)
    ]
    # GPU 1 shows links 0 and 1, then the user's "...": never "2 links".
    assert second.uuid == "GPU-39ac7bce-e3d6-b426-008e-fa47897c72d5"
    assert isinstance(second.links, Unavailable)
    assert second.links.reason is Reason.NOT_MEASURED
    assert "cut short after link 1" in second.links.detail


def test_azure_a100_capture_has_12_links_at_25(captures_dir: Path) -> None:
    (gpu,) = parse_nvlink_status((captures_dir / A100_S).read_text(encoding="utf-8")).gpus
    assert (gpu.index, gpu.name, gpu.uuid) == (
        7,
        "NVIDIA A100-SXM4-80GB",
        "GPU-c7e253b0-c227-6f10-e860-7482c85e7ce8",
    )
    assert [(s.link, s.active, s.speed_gb_s) for s in links_of(gpu)] == [
        (i, True, 25.0) for i in range(12)
    ]


def test_an_nvlink_info_output_is_not_read_as_links(captures_dir: Path) -> None:
    # nvlink -info (firmware, NVLE) has the same GPU headers and no link line: no GPU
    # may come out of it with "0 links up".
    report = parse_nvlink_status((captures_dir / GB200_INFO).read_text(encoding="utf-8"))
    assert [gpu.index for gpu in report.gpus] == [0, 1]
    for gpu in report.gpus:
        assert isinstance(gpu.links, Unavailable)
        assert gpu.links.reason is Reason.NOT_SUPPORTED


def test_all_links_inactive_is_no_link_up() -> None:
    (gpu,) = parse_nvlink_status(fixture(INACTIVE)).gpus
    assert (gpu.index, gpu.uuid) == (6, "GPU-9667d95e-6d22-0c22-1f57-c481f13e7c44")
    assert gpu.links == ()


def test_a100_40gb_nvlink_s_behind_a_shell_prompt() -> None:
    (gpu,) = parse_nvlink_status(fixture(A100_40_S)).gpus
    assert (gpu.index, gpu.uuid) == (0, A100_40_UUIDS[0])
    assert {(s.active, s.speed_gb_s) for s in links_of(gpu)} == {(True, 25.0)}
    assert len(links_of(gpu)) == 12


def test_elided_h100_output_is_not_measured() -> None:
    (gpu,) = parse_nvlink_status(fixture(H100_S)).gpus
    assert gpu.name == "NVIDIA H100 80GB HBM3"
    assert isinstance(gpu.links, Unavailable)
    assert "cut short after link 0" in gpu.links.detail


def test_v100_with_two_links_down_and_no_uuid_shown() -> None:
    (gpu,) = parse_nvlink_status(fixture(V100_S)).gpus
    assert (gpu.index, gpu.name) == (3, "Tesla V100-SXM2-32GB")
    assert isinstance(gpu.uuid, Unavailable)
    assert [(s.link, s.active) for s in links_of(gpu)] == [
        (0, True),
        (1, True),
        (2, True),
        (3, False),
        (4, True),
        (5, False),
    ]
    assert {s.speed_gb_s for s in links_of(gpu) if s.active} == {25.781}


# ---------------------------------------------------------------- nvlink -e on real outputs


def test_a100_40gb_nvlink_e_loop_reads_eight_gpus_all_zero() -> None:
    report = parse_nvlink_errors(fixture(A100_40_E))
    assert tuple(gpu.uuid for gpu in report.gpus) == A100_40_UUIDS
    assert [gpu.index for gpu in report.gpus] == list(range(8))
    for gpu in report.gpus:
        assert isinstance(gpu.errors, tuple)
        assert [c.link for c in gpu.errors] == list(range(12))
        for counts in gpu.errors:
            assert (counts.crc_flit, counts.replay, counts.recovery) == (0, 0, 0)
            # One "CRC Errors" count: read as flit, the data count not offered.
            assert isinstance(counts.crc_data, Unavailable)
            assert counts.crc_data.reason is Reason.NOT_SUPPORTED


def test_elided_h100_error_counters_are_not_measured() -> None:
    (gpu,) = parse_nvlink_errors(fixture(H100_E)).gpus
    assert isinstance(gpu.errors, Unavailable)
    assert gpu.errors.reason is Reason.NOT_MEASURED
    assert "cut short after link 1" in gpu.errors.detail


def test_older_drivers_print_flit_and_data_crc_apart() -> None:
    # The R4xx layout: two CRC counters per link, N/A where a counter is not offered.
    text = (
        "GPU 0: Tesla V100-SXM2-16GB (UUID: GPU-9d6ee7d4-0f4d-8f37-1a84-bd8e0d6c1a9b)\n"
        "\t Link 0: Replay Errors: 3\n"
        "\t Link 0: Recovery Errors: 0\n"
        "\t Link 0: CRC FLIT Errors: 12\n"
        "\t Link 0: CRC Data Errors: N/A\n"
    )
    (gpu,) = parse_nvlink_errors(text).gpus
    assert isinstance(gpu.errors, tuple)
    (counts,) = gpu.errors
    assert (counts.link, counts.replay, counts.recovery, counts.crc_flit) == (0, 3, 0, 12)
    assert counts.crc_data == Unavailable(Reason.NOT_SUPPORTED, "nvidia-smi prints N/A")


def test_newer_counters_are_skipped_not_refused() -> None:
    # R570+ adds ECC and data Tx/Rx counts after the four judged ones.
    text = (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5c3a2b1d-0e9f-4a8b-9c7d-6e5f4a3b2c1d)\n"
        "         Link 0: Replay Errors: 1\n"
        "         Link 0: Recovery Errors: 0\n"
        "         Link 0: CRC Errors: 0\n"
        "         Link 0: ECC Errors: 0\n"
        "         Link 0: Data Tx Errors: 0\n"
        "         Link 0: Data Rx Errors: 0\n"
    )
    (gpu,) = parse_nvlink_errors(text).gpus
    assert isinstance(gpu.errors, tuple)
    (counts,) = gpu.errors
    assert (counts.replay, counts.recovery, counts.crc_flit) == (1, 0, 0)


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("GPU 2: NVIDIA GB200 (UUID:\n", "ends inside this GPU's header"),
        (
            "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-c7e253b0-c227-6f10-e860-7482c85e7ce8)\n"
            "\t Link 0: 25 GB/s\n\t Link 1: 25 G\n",
            "link 1 reads '25 G'",
        ),
        (
            "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-c7e253b0-c227-6f10-e860-7482c85e7ce8)\n"
            "\t Link 0: 25 GB/s\n\t Link 0: 25 GB/s\n",
            "link 0 is listed twice",
        ),
    ],
)
def test_a_gpu_block_that_is_not_whole_is_not_measured(text: str, detail: str) -> None:
    (gpu,) = parse_nvlink_status(text).gpus
    assert isinstance(gpu.links, Unavailable)
    assert detail in gpu.links.detail


def test_nvidia_smi_error_instead_of_links_is_the_error() -> None:
    text = (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n"
    )
    report = parse_nvlink_status(text)
    assert report.gpus == ()
    assert report.error is not None
    assert "couldn't communicate" in report.error
    assert parse_nvlink_status("").error is None


@pytest.mark.parametrize("parse", [parse_nvlink_status, parse_nvlink_errors])
def test_text_that_is_no_nvlink_output_is_bad_input(parse: object) -> None:
    assert callable(parse)
    with pytest.raises(ParseError, match=r"no 'GPU N: <name> \(UUID: \.\.\.\)' line"):
        parse("Timestamp : Tue Mar 11\nDriver Version : 550.90.07\n")
    twice = (
        "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-c7e253b0-c227-6f10-e860-7482c85e7ce8)\n"
        "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-c7e253b0-c227-6f10-e860-7482c85e7ce8)\n"
    )
    with pytest.raises(ParseError, match="GPU 0 is listed twice"):
        parse(twice)


# ---------------------------------------------------------------- bundles


def _bundle(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")
    return directory


def _status_for(uuids: tuple[str, ...]) -> str:
    """nvlink -s in the real A100 layout for the capture's GPUs, GPU 0 listed last."""
    blocks = []
    for index in reversed(range(len(uuids))):
        lines = [f"GPU {index}: NVIDIA A100-SXM4-80GB (UUID: {uuids[index]})"]
        lines += [f"\t Link {k}: 25 GB/s" for k in range(12)]
        blocks.append("\n".join(lines))
    return "\n".join(blocks) + "\n"


def test_bundle_nvlink_files_give_each_gpu_its_links_by_uuid(
    tmp_path: Path, captures_dir: Path
) -> None:
    # GPU 2's link 7 down: the facts must put it on the GPU with that UUID.
    lines = _status_for(A100X4_UUIDS).splitlines()
    header = lines.index(f"GPU 2: NVIDIA A100-SXM4-80GB (UUID: {A100X4_UUIDS[2]})")
    lines[header + 1 + 7] = "\t Link 7: <inactive>"
    errors = "".join(
        f"GPU {i}: NVIDIA A100-SXM4-80GB (UUID: {uuid})\n"
        + "".join(
            f"\t Link {k}: Replay Errors: {5 if (i, k) == (1, 3) else 0}\n"
            f"\t Link {k}: Recovery Errors: 0\n\t Link {k}: CRC Errors: 0\n\n"
            for k in range(12)
        )
        for i, uuid in enumerate(A100X4_UUIDS)
    )
    directory = _bundle(
        tmp_path / "bundle",
        {
            "nvidia-smi-q.txt": (captures_dir / A100X4_Q).read_text(encoding="utf-8"),
            "nvidia-smi-nvlink-s.txt": "\n".join(lines) + "\n",
            "nvidia-smi-nvlink-e.txt": errors,
        },
    )
    facts = collect_capture(directory)
    by_uuid = {gpu.uuid: gpu for gpu in facts.gpus}
    down = by_uuid[A100X4_UUIDS[2]].nvlinks
    assert isinstance(down, tuple)
    assert [link.link for link in down if not link.active] == [7]
    assert {link.speed_gb_s for link in down if link.active} == {25.0}
    replays = by_uuid[A100X4_UUIDS[1]].nvlink_errors
    assert isinstance(replays, tuple)
    assert [(c.link, c.replay) for c in replays if c.replay != 0] == [(3, 5)]
    # Judged against the catalog: GPU 2 fails naming link 7, the others pass.
    sku = load_catalog().get("a100-sxm4-80gb")
    links = [f for f in nvlink.check(facts, Policy(), sku) if f.check == "nvlink.links"]
    assert {(f.gpu_uuid, f.severity) for f in links} == {
        (A100X4_UUIDS[0], PASS),
        (A100X4_UUIDS[1], PASS),
        (A100X4_UUIDS[2], FAIL),
        (A100X4_UUIDS[3], PASS),
    }


def test_a_bundle_nvlink_file_of_other_gpus_is_not_taken(
    tmp_path: Path, captures_dir: Path
) -> None:
    # The Azure capture is another host's GPU 7: its UUID matches no GPU of this query.
    directory = _bundle(
        tmp_path / "bundle",
        {
            "nvidia-smi-q.txt": (captures_dir / A100X4_Q).read_text(encoding="utf-8"),
            "nvidia-smi-nvlink-s.txt": (captures_dir / A100_S).read_text(encoding="utf-8"),
        },
    )
    facts = collect_capture(directory)
    for gpu in facts.gpus:
        assert isinstance(gpu.nvlinks, Unavailable)
        assert gpu.nvlinks.reason is Reason.NOT_MEASURED


def test_a_banner_bundle_takes_links_by_index(tmp_path: Path, captures_dir: Path) -> None:
    banner = (captures_dir / "nvidia-smi-banner/gls-A100SXMx4-555.42.02.txt").read_text(
        encoding="utf-8"
    )
    directory = _bundle(
        tmp_path / "bundle",
        {"nvidia-smi.txt": banner, "nvidia-smi-nvlink-s.txt": fixture(A100_40_S)},
    )
    facts = collect_capture(directory)
    first = facts.gpus[0].nvlinks
    assert isinstance(first, tuple)
    assert len(first) == 12
    assert all(isinstance(gpu.nvlinks, Unavailable) for gpu in facts.gpus[1:])


def test_nvidia_smi_error_in_the_bundle_file_is_an_error_for_every_gpu(
    tmp_path: Path, captures_dir: Path
) -> None:
    directory = _bundle(
        tmp_path / "bundle",
        {
            "nvidia-smi-q.txt": (captures_dir / A100X4_Q).read_text(encoding="utf-8"),
            "nvidia-smi-nvlink-e.txt": "Failed to initialize NVML: Unknown Error\n",
        },
    )
    for gpu in collect_capture(directory).gpus:
        assert isinstance(gpu.nvlink_errors, Unavailable)
        assert gpu.nvlink_errors.reason is Reason.ERROR
        assert "nvidia-smi-nvlink-e.txt: Failed to initialize NVML" in gpu.nvlink_errors.detail


def test_a_broken_nvlink_file_is_bad_input(tmp_path: Path) -> None:
    directory = _bundle(
        tmp_path / "bundle", {"nvidia-smi-nvlink-s.txt": "this is not nvidia-smi output\n"}
    )
    with pytest.raises(CaptureError, match=r"nvidia-smi-nvlink-s\.txt: not `nvidia-smi nvlink -s`"):
        CaptureSystem(directory)


def test_capture_records_both_nvlink_commands() -> None:
    from validator.node.capture.capture_replay import BUNDLE

    argv = {entry.name: entry.argv for entry in BUNDLE}
    assert argv["nvidia-smi-nvlink-s.txt"] == ("nvidia-smi", "nvlink", "-s")
    assert argv["nvidia-smi-nvlink-e.txt"] == ("nvidia-smi", "nvlink", "-e")


# ---------------------------------------------------------------- nvlink.links


def _facts_with(gpus: tuple[GpuFacts, ...]) -> NodeFacts:
    return dataclasses.replace(healthy_node(), gpus=gpus, burn=None)


def _real_gpu(parsed: NvLinkGpu) -> GpuFacts:
    # A GPU that answered (so it is judged), with the links the output gave.
    return dataclasses.replace(
        healthy_node().gpus[0],
        index=parsed.index,
        name=parsed.name,
        uuid=parsed.uuid,
        nvlinks=parsed.links,
    )


def _links(facts: NodeFacts, sku_id: str | None) -> list[Finding]:
    sku = load_catalog().get(sku_id) if sku_id else None
    return [f for f in nvlink.check(facts, Policy(), sku) if f.check == "nvlink.links"]


def test_gb200_capture_passes_gpu0_and_leaves_the_elided_gpu1_unknown(
    captures_dir: Path,
) -> None:
    report = parse_nvlink_status((captures_dir / GB200_S).read_text(encoding="utf-8"))
    facts = _facts_with(tuple(_real_gpu(gpu) for gpu in report.gpus))
    first, second = _links(facts, "gb200")
    assert (first.gpu_index, first.severity) == (0, PASS)
    assert first.message == "GPU 0 has all 18 NVLinks up at 53.125 GB/s"
    assert (second.gpu_index, second.severity, second.required) == (1, UNKNOWN, True)
    assert "cut short" in second.message
    assert second.action is Action.RERUN


def test_azure_a100_capture_passes(captures_dir: Path) -> None:
    (parsed,) = parse_nvlink_status((captures_dir / A100_S).read_text(encoding="utf-8")).gpus
    (finding,) = _links(_facts_with((_real_gpu(parsed),)), "a100-sxm4-80gb")
    assert (finding.severity, finding.gpu_index, finding.gpu_uuid) == (PASS, 7, parsed.uuid)
    assert finding.observed == "12 up at 25 GB/s"


def test_all_links_inactive_fails_with_an_rma_on_sxm() -> None:
    (parsed,) = parse_nvlink_status(fixture(INACTIVE)).gpus
    (finding,) = _links(_facts_with((_real_gpu(parsed),)), "a100-sxm4-80gb")
    assert finding.severity is FAIL
    assert finding.message == (
        "GPU 6 NVLinks: 0 of 12 up, 12 not listed at all (A100 SXM4 80GB has 12 at 25 GB/s); "
        "check nvidia-smi nvlink -s -i 6"
    )
    assert finding.action is Action.DRAIN_RMA
    assert "SXM baseboard" in finding.action_source


def test_v100_with_links_3_and_5_down_fails_naming_them() -> None:
    (parsed,) = parse_nvlink_status(fixture(V100_S)).gpus
    (finding,) = _links(_facts_with((_real_gpu(parsed),)), "v100-sxm2-32gb")
    assert finding.severity is FAIL
    assert "GPU 3 NVLinks: links 3, 5 down; 4 of 6 up" in finding.message
    assert finding.observed == "4 of 6 up"
    assert finding.gpu_uuid is None  # the paste hid it


def test_a_slow_link_fails_naming_link_and_speed() -> None:
    links = tuple(
        NvLinkState(link=i, active=True, speed_gb_s=13.281 if i == 4 else 26.562) for i in range(18)
    )
    facts = with_gpu(healthy_node(), 2, nvlinks=links)
    failed = [f for f in _links(facts, "h100-sxm") if f.severity is FAIL]
    assert [f.gpu_index for f in failed] == [2]
    assert "link 4 at 13.281 GB/s, below 26.562 GB/s" in failed[0].message
    assert failed[0].action is Action.DRAIN_RMA


def test_a_superchip_link_down_points_at_the_cable() -> None:
    links = tuple(NvLinkState(link=i, active=i != 9, speed_gb_s=53.125) for i in range(18))
    gpu = dataclasses.replace(healthy_node().gpus[0], name="NVIDIA GB200", nvlinks=links)
    (finding,) = _links(_facts_with((gpu,)), "gb200")
    assert finding.severity is FAIL
    assert "link 9 down; 17 of 18 up" in finding.message
    assert finding.action is Action.RESEAT_CABLE_RISER


def test_links_up_without_a_speed_are_an_unknown_that_does_not_block() -> None:
    # The healthy node's NVML facts: 18 links up, speed not read.
    findings = _links(pre_counters_node(), "h100-sxm")
    assert {(f.severity, f.required) for f in findings} == {(UNKNOWN, False)}
    assert "all 18 NVLinks up, but the speed of links 0, 1" in findings[0].message


def test_links_not_measured_on_an_nvlink_sku_is_a_required_unknown() -> None:
    facts = with_gpu(healthy_node(), 5, nvlinks=Unavailable(Reason.NOT_MEASURED, "no file"))
    (finding,) = [f for f in _links(facts, "h100-sxm") if f.gpu_index == 5]
    assert (finding.severity, finding.required) == (UNKNOWN, True)
    assert finding.message == (
        "GPU 5 NVLink state could not be read, so it cannot be judged: not measured: no file"
    )


@pytest.mark.parametrize("sku_id", ["l40s", "h100-nvl", None])
def test_no_fixed_link_count_judges_no_link(sku_id: str | None) -> None:
    assert _links(healthy_node(), sku_id) == []


# ---------------------------------------------------------------- nvlink.errors


def _counts(**growth: int) -> tuple[ErrorCounters, ErrorCounters]:
    """Counters before and after the burn on 18 links; ``growth`` keys: <counter>_<link>."""
    base = 7  # counted since the driver loaded: never zero-based
    before = tuple(
        NvLinkErrorCounts(link=i, crc_flit=base, crc_data=base, replay=base, recovery=base)
        for i in range(18)
    )
    after = []
    for counts in before:
        changes = {
            name: getattr(counts, name) + growth.get(f"{name}_{counts.link}", 0)
            for name in ("crc_flit", "crc_data", "replay", "recovery")
        }
        after.append(dataclasses.replace(counts, **changes))
    return ErrorCounters(nvlink_errors=before), ErrorCounters(nvlink_errors=tuple(after))


def _with_counters(index: int, before: ErrorCounters, after: ErrorCounters) -> NodeFacts:
    facts = healthy_node()
    assert facts.burn is not None
    gpus = tuple(
        dataclasses.replace(g, counters_before=before, counters_after=after)
        if g.index == index
        else dataclasses.replace(g, counters_before=_counts()[0], counters_after=_counts()[1])
        for g in facts.burn.gpus
    )
    return dataclasses.replace(facts, burn=dataclasses.replace(facts.burn, gpus=gpus))


def _errors(facts: NodeFacts, sku_id: str | None = "h100-sxm") -> list[Finding]:
    sku: Sku | None = load_catalog().get(sku_id) if sku_id else None
    return [f for f in nvlink.check(facts, Policy(), sku) if f.check == "nvlink.errors"]


def _not_passed(findings: list[Finding]) -> list[tuple[int | None, Severity]]:
    return [(f.gpu_index, f.severity) for f in findings if f.severity is not PASS]


@pytest.mark.parametrize(
    ("growth", "words"),
    [
        ({"replay_5": 1}, "link 5 replay errors +1 (7 -> 8, limit 0)"),
        ({"recovery_11": 2}, "link 11 recovery errors +2 (7 -> 9, limit 0)"),
        ({"crc_flit_0": 101}, "link 0 CRC flit errors +101 (7 -> 108, limit 100)"),
        ({"crc_data_17": 250}, "link 17 CRC data errors +250 (7 -> 257, limit 100)"),
    ],
)
def test_counter_growth_above_the_limit_fails_naming_gpu_and_link(
    growth: dict[str, int], words: str
) -> None:
    findings = _errors(_with_counters(3, *_counts(**growth)))
    assert _not_passed(findings) == [(3, FAIL)]
    (failed,) = [f for f in findings if f.severity is FAIL]
    assert failed.message == f"GPU 3 NVLink errors grew during the burn-in: {words}"
    assert failed.action is Action.DRAIN_RMA
    assert failed.gpu_uuid == "GPU-00000003-aaaa-bbbb-cccc-000000000000"


def test_growth_within_the_limits_passes() -> None:
    findings = _errors(_with_counters(3, *_counts(crc_flit_2=100, crc_data_2=100)))
    assert _not_passed(findings) == []
    assert len(findings) == 8
    assert findings[3].message == (
        "GPU 3 NVLink errors stayed within the limits on its 18 links during the burn-in"
    )


def test_a_policy_limit_is_the_limit() -> None:
    facts = _with_counters(3, *_counts(replay_5=4))
    policy = Policy(thresholds=dataclasses.replace(Policy().thresholds, nvlink_replay_growth_max=5))
    sku = load_catalog().get("h100-sxm")
    judged = [f for f in nvlink.check(facts, policy, sku) if f.check == "nvlink.errors"]
    assert _not_passed(judged) == []


def test_the_real_a100_counters_unchanged_pass_with_the_data_count_not_offered() -> None:
    # nvlink -e of a real A100-SXM4-40GB before and after: one CRC count, all zero.
    counts = parse_nvlink_errors(fixture(A100_40_E)).gpus[0].errors
    assert isinstance(counts, tuple)
    facts = _with_counters(
        0, ErrorCounters(nvlink_errors=counts), ErrorCounters(nvlink_errors=counts)
    )
    (finding,) = [f for f in _errors(facts, "a100-sxm4-40gb") if f.gpu_index == 0]
    assert finding.severity is PASS
    assert "on its 12 links" in finding.message


def test_counters_not_read_on_an_nvlink_sku_are_a_required_unknown() -> None:
    # The healthy node's burn read ECC and remaps only, as before issue 13.
    findings = _errors(pre_counters_node())
    assert {(f.severity, f.required) for f in findings} == {(UNKNOWN, True)}
    assert findings[0].message == (
        "GPU 0 NVLink error counters were not read before and after the burn-in, so their "
        "growth cannot be judged: not measured"
    )
    assert findings[0].action is Action.RERUN


def test_counters_the_driver_does_not_offer_do_not_block() -> None:
    missing = ErrorCounters(nvlink_errors=Unavailable(Reason.NOT_SUPPORTED, "Blackwell"))
    findings = [f for f in _errors(_with_counters(4, missing, missing)) if f.gpu_index == 4]
    assert [(f.severity, f.required) for f in findings] == [(UNKNOWN, False)]


def test_a_count_that_went_back_cannot_be_compared() -> None:
    before, after = _counts()
    assert isinstance(after.nvlink_errors, tuple)
    reset = dataclasses.replace(
        after,
        nvlink_errors=tuple(
            dataclasses.replace(c, replay=0) if c.link == 6 else c for c in after.nvlink_errors
        ),
    )
    findings = [f for f in _errors(_with_counters(1, before, reset)) if f.gpu_index == 1]
    assert [(f.severity, f.required) for f in findings] == [(UNKNOWN, True)]
    assert "link 6 replay count went back (7 -> 0)" in findings[0].message


def test_a_link_read_only_before_cannot_be_compared() -> None:
    before, after = _counts()
    assert isinstance(after.nvlink_errors, tuple)
    fewer = dataclasses.replace(after, nvlink_errors=after.nvlink_errors[:17])
    (finding,) = [f for f in _errors(_with_counters(2, before, fewer)) if f.gpu_index == 2]
    assert finding.severity is UNKNOWN
    assert "link 17 read only before" in finding.message


def test_no_burn_judges_no_counter() -> None:
    assert _errors(dataclasses.replace(healthy_node(), burn=None)) == []


def test_a_gpu_whose_burn_failed_is_left_to_the_burn_check() -> None:
    facts = pre_counters_node()
    assert facts.burn is not None
    gpus = tuple(
        dataclasses.replace(g, status=BurnStatus.TIMEOUT) if g.index == 6 else g
        for g in facts.burn.gpus
    )
    facts = dataclasses.replace(facts, burn=dataclasses.replace(facts.burn, gpus=gpus))
    assert 6 not in {f.gpu_index for f in _errors(facts)}


def test_a_sku_without_nvlink_judges_counters_only_where_they_were_read() -> None:
    assert _errors(pre_counters_node(), "l40s") == []
    grown = _with_counters(3, *_counts(replay_1=2))
    failed = [f for f in _errors(grown, None) if f.severity is FAIL]
    assert [(f.gpu_index, f.action) for f in failed] == [(3, Action.RESEAT_CABLE_RISER)]


def test_a_node_with_two_links_down_fails_through_the_judge_naming_them() -> None:
    from tests.judge.test_judge_healthy import judge

    links = tuple(NvLinkState(link=i, active=i not in (4, 9), speed_gb_s=26.562) for i in range(18))
    result = judge(with_gpu(healthy_node(), 6, nvlinks=links))
    (finding,) = [f for f in result.findings if f.check == "nvlink.links" and f.gpu_index == 6]
    assert finding.severity.value == "FAIL"
    assert finding.message.startswith("GPU 6 NVLinks: links 4, 9 down; 16 of 18 up")
    assert finding.action.value == "drain_and_rma"
    assert result.verdict.value == "NOT_CERTIFIED"


# ---------------------------------------------------------------- digits that are not ASCII

H100_Q = "nvidia-smi-q/gls-H100SXMx8-565.57.01.txt"
H100_Q_GPU0 = "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1"
ERRORS_HEADER = f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {H100_Q_GPU0})"
LONG = "9" * 5000  # more digits than Python's int() takes from a string


def _crc_counts(value: str) -> Measured[int]:
    (gpu,) = parse_nvlink_errors(f"{ERRORS_HEADER}\n\t Link 0: CRC Errors: {value}\n").gpus
    assert isinstance(gpu.errors, tuple)
    return gpu.errors[0].crc_flit


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        ("\u00b2", "nvidia-smi prints '\u00b2'"),  # superscript two: str.isdigit() says yes
        ("\u0663", "nvidia-smi prints '\u0663'"),  # Arabic-Indic three: int() reads it as 3
        (LONG, "nvidia-smi prints '99999999999999999999'... (5000 characters)"),
    ],
)
def test_a_count_that_is_not_ascii_digits_is_an_error_not_a_crash(value: str, detail: str) -> None:
    count = _crc_counts(value)
    assert count == Unavailable(Reason.ERROR, detail)


def test_a_twenty_digit_count_still_reads() -> None:
    assert _crc_counts("18446744073709551615") == 18446744073709551615


@pytest.mark.parametrize("speed", ["\u0665\u0663.\u0661\u0662\u0665 GB/s", f"{LONG} GB/s"])
def test_a_speed_that_is_not_ascii_digits_is_an_error(speed: str) -> None:
    (gpu,) = parse_nvlink_status(f"{ERRORS_HEADER}\n\t Link 0: {speed}\n").gpus
    assert isinstance(gpu.links, Unavailable)
    assert gpu.links.reason is Reason.ERROR
    assert len(gpu.links.detail) < 120


def test_a_link_number_too_long_to_be_one_cuts_the_gpu() -> None:
    text = f"{ERRORS_HEADER}\n\t Link 0: 26.562 GB/s\n\t Link {LONG}: 26.562 GB/s\n"
    (gpu,) = parse_nvlink_status(text).gpus
    assert gpu.links == Unavailable(
        Reason.NOT_MEASURED,
        "the output is cut short after link 0: a link is numbered '99999999999999999999'... "
        "(5000 characters)",
    )


@pytest.mark.parametrize("parse", [parse_nvlink_status, parse_nvlink_errors])
def test_a_gpu_number_too_long_to_be_one_is_bad_input(parse: object) -> None:
    assert callable(parse)
    with pytest.raises(ParseError, match=r"names a GPU '9{20}'\.\.\. \(5000 characters\)"):
        parse(f"GPU {LONG}: NVIDIA H100 80GB HBM3 (UUID: {H100_Q_GPU0})\n\t Link 0: 25 GB/s\n")


def _certify_bundle(
    tmp_path: Path, captures_dir: Path, errors: str, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    query = (captures_dir / H100_Q).read_text(encoding="utf-8")
    directory = _bundle(
        tmp_path / "bundle", {"nvidia-smi-q.txt": query, "nvidia-smi-nvlink-e.txt": errors}
    )
    capsys.readouterr()
    code = main(["certify", "--capture", str(directory), "--burn", "0", "--json"])
    out, err = capsys.readouterr()
    return code, out, err


def test_certify_reads_a_bundle_count_of_superscript_two_as_not_measured(
    tmp_path: Path, captures_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    errors = f"{ERRORS_HEADER}\n\t Link 0: CRC Errors: \u00b2\n"
    code, out, err = _certify_bundle(tmp_path, captures_dir, errors, capsys)
    assert code != ExitCode.BUG, err  # was: internal error: ValueError
    assert "internal error" not in err
    (link,) = json.loads(out)["nodes"][0]["facts"]["gpus"][0]["nvlink_errors"]
    assert link["crc_flit"] == {"unavailable": "error", "detail": "nvidia-smi prints '\u00b2'"}


def test_certify_refuses_a_bundle_gpu_number_of_5000_digits_in_one_line(
    tmp_path: Path, captures_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    errors = f"GPU {LONG}: NVIDIA H100 80GB HBM3 (UUID: {H100_Q_GPU0})\n\t Link 0: CRC Errors: 0\n"
    code, _, err = _certify_bundle(tmp_path, captures_dir, errors, capsys)
    assert code == ExitCode.BAD_INPUT
    assert err.count("\n") == 1
    assert err.startswith("gpuready: error: ")
    assert "nvidia-smi-nvlink-e.txt" in err
    assert "names a GPU '99999999999999999999'... (5000 characters), not a GPU number" in err
    assert len(err) < 400


# ---------------------------------------------------------------- one repair, certify and drift


@pytest.mark.parametrize(
    ("sku_id", "action"),
    [
        ("h100-sxm", Action.DRAIN_RMA),
        ("b200", Action.DRAIN_RMA),
        ("gb200", Action.RESEAT_CABLE_RISER),  # the rack's NVLink cable cartridges
        ("gh200", Action.RESEAT_CABLE_RISER),
        ("h100-nvl", Action.RESEAT_CABLE_RISER),  # the bridge between the cards
        (None, Action.RESEAT_CABLE_RISER),
    ],
)
def test_link_repair_by_board(sku_id: str | None, action: Action) -> None:
    sku = load_catalog().get(sku_id) if sku_id is not None else None
    found, source = nvlink.link_repair(sku)
    assert found is action
    assert source.startswith("gpuready: ")


def test_the_table_defaults_agree_with_link_repair_where_no_sku_is_known() -> None:
    # Checks set link_repair(sku) on their FAILs; the table's row is the fallback.
    fallback, _ = nvlink.link_repair(None)
    for check in ("nvlink.links", "nvlink.errors", "drift.nvlink", "drift.nvlink_errors"):
        assert RULES[check].fail is fallback, check
        assert RULES[check].unknown is Action.RERUN, check


def test_drift_holds_links_to_the_judges_speed_tolerance() -> None:
    from validator.drift import nvlink_drift as gpus

    assert gpus.LINK_SPEED_TOLERANCE is nvlink.SPEED_TOLERANCE


def test_an_unknown_link_says_why_it_is_run_again() -> None:
    gpu = dataclasses.replace(
        healthy_node().gpus[0], nvlinks=Unavailable(Reason.ERROR, "NVML error 999")
    )
    (finding,) = _links(_facts_with((gpu,)), "h100-sxm")
    assert (finding.severity, finding.action) == (UNKNOWN, Action.RERUN)
    assert finding.action_source == nvlink.RERUN_SOURCE
    assert finding.action_source.startswith("gpuready: ")


def test_unread_counters_say_why_they_are_run_again() -> None:
    (finding, *_) = _errors(pre_counters_node())
    assert (finding.severity, finding.action) == (UNKNOWN, Action.RERUN)
    assert finding.action_source == nvlink.RERUN_SOURCE
