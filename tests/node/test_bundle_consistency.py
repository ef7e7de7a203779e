"""A bundle's files must describe one node at one moment: cross-file conflicts and cut queries.

Every bundle here is made of real outputs from ../shared/captures, read in place
and combined under tmp_path. The corpus holds no ``lspci`` capture: PCI listings
are written from the bus ids of the real ``-q`` they stand next to, in the
formats ``lspci -n`` and sysfs use. Which corpus files are not whole (cut or
trimmed by whoever published them) is read from SOURCES.md, not listed here.
"""

from __future__ import annotations

import io
import json
import re
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from tests.collecting import collect_capture
from tests.conftest import captures_root
from validator.cli.main import main
from validator.error_tree import CaptureError, ExitCode
from validator.judge.checks import consistency
from validator.judge.policy import Policy
from validator.model import NodeFacts, Severity, SourceConflict
from validator.node.capture.bundle_consistency import (
    banner_view,
    bundle_conflicts,
    pci_view,
    query_view,
    same_name,
)
from validator.node.capture.capture_replay import CaptureSystem
from validator.node.parsers.smi_banner import parse_banner
from validator.node.parsers.smi_query import parse_smi_query
from validator.node.parsers.smi_xml import parse_smi_xml

CHECK = "inventory.sources_agree"
RECAPTURE = "re-capture the bundle in one go on the node: `gpuready capture DIR`"
A40_Q = "nvidia-smi-q/gls-A40x10-550.127.05.txt"
H100_Q = "nvidia-smi-q/gls-H100SXMx8-565.57.01.txt"


def _read(captures: Path, name: str) -> str:
    return (captures / name).read_text(encoding="utf-8")


def _bundle(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")
    return directory


# Two benign NVRM lines of a real kernel log: a log with no Xid in it.
DMESG_LINES = ("xid/gpud-dmesg-xid-119-h100-xe9680.log", 2)
# A bundle has no burn-in, and most lack nvcc and cuDNN: not required here, so that the
# only thing left to stop a certificate is what this file is about.
# The bundles hold no GPUDirect files (single hosts without an RDMA fabric) and no systemd
# state (systemctl.txt): the policy says so (no service required), as it says there is no
# nvcc or cuDNN to judge.
POLICY = (
    "require_burn: false\nrequire_nvcc: false\nrequire_cudnn: false\n"
    "gpudirect: {required: false}\nhost: {services: []}\n"
)


def _certify(directory: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    """certify --capture over the bundle, a clean kernel log added where it has none."""
    root = captures_root()
    assert root is not None
    if not (directory / "dmesg.txt").exists():
        log, lines = DMESG_LINES
        head = _read(root, log).splitlines(keepends=True)[:lines]
        (directory / "dmesg.txt").write_text("".join(head), encoding="utf-8")
    policy = directory.parent / f"{directory.name}-policy.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    capsys.readouterr()
    code = main(
        ["certify", "--capture", str(directory), "--burn", "0", "--json", "--policy", str(policy)]
    )
    node: dict[str, Any] = json.loads(capsys.readouterr().out)["nodes"][0]
    return code, node


def _sources_agree(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [f for f in node["findings"] if f["check"] == CHECK]


_bundles = iter(range(10**6))


def _conflicts_of(tmp_path: Path, files: dict[str, str]) -> tuple[SourceConflict, ...]:
    """What collect_capture finds in a bundle of these files (a fresh folder each call)."""
    return collect_capture(_bundle(tmp_path / f"bundle-{next(_bundles)}", files)).source_conflicts


# ---------------------------------------------------------------- the corpus: no false alarm


def _corpus_files(folder: str, pattern: str) -> list[str]:
    root = captures_root()
    if root is None:
        return ["<captures absent>"]
    names = sorted(p.name for p in (root / folder).glob(pattern) if p.is_file())
    assert names, f"no files in captures/{folder}"
    return names


def _not_whole(captures: Path) -> set[str]:
    """Corpus files SOURCES.md says were cut or trimmed by their publisher."""
    rows = re.findall(r"^\| `([^`]+)` \|(.*)$", _read(captures, "SOURCES.md"), re.M)
    return {path for path, rest in rows if re.search(r"\btrimmed\b|\btruncated\b", rest, re.I)}


@pytest.mark.parametrize("name", _corpus_files("nvidia-smi-q", "*.txt"))
def test_every_real_query_text_is_whole_unless_its_source_says_cut(
    name: str, captures_dir: Path
) -> None:
    path = f"nvidia-smi-q/{name}"
    text = _read(captures_dir, path)
    view = query_view("nvidia-smi-q.txt", parse_smi_query(text), text)
    assert view is not None
    conflicts = bundle_conflicts([view])
    if path in _not_whole(captures_dir):
        assert [c.what for c in conflicts] == ["truncated"], conflicts
    else:
        assert conflicts == ()
        assert view.lost == ()


@pytest.mark.parametrize("name", _corpus_files("nvidia-smi-xml", "*.xml"))
def test_every_real_query_xml_is_whole_unless_its_source_says_trimmed(
    name: str, captures_dir: Path
) -> None:
    path = f"nvidia-smi-xml/{name}"
    text = _read(captures_dir, path)
    view = query_view("nvidia-smi-q.xml", parse_smi_xml(text), text)
    assert view is not None
    conflicts = bundle_conflicts([view])
    if path in _not_whole(captures_dir):
        # telegraf-a100-sxm4-v12 keeps 1 of its 4 <gpu>; two others lost <processes>.
        assert [c.what for c in conflicts] == ["truncated"], conflicts
    else:
        assert conflicts == ()


def test_sources_md_flags_the_files_we_know_are_cut(captures_dir: Path) -> None:
    # Not vacuous: the rule above reads these four rows as not whole.
    assert _not_whole(captures_dir) >= {
        "nvidia-smi-q/gpud-h100-535.183.01-invalid-labels-TRUNCATED.txt",
        "nvidia-smi-xml/telegraf-a100-sxm4-v12.xml",
        "nvidia-smi-xml/telegraf-gtx-1070-ti.xml",
        "nvidia-smi-xml/netdata-rtx-pro-6000-driver-580.xml",
    }


def _same_host_pairs() -> list[tuple[str, str]]:
    """(banner, -q) captured on the same machine: the corpus names them alike."""
    root = captures_root()
    if root is None:
        return [("<captures absent>", "")]
    pairs = []
    for banner in sorted((root / "nvidia-smi-banner").iterdir()):
        stem = banner.name.split("__")[0].removesuffix(".txt")
        for query in sorted((root / "nvidia-smi-q").iterdir()):
            if query.name.split("__")[0].removesuffix(".txt") == stem:
                pairs.append((banner.name, query.name))
    assert len(pairs) > 30
    return pairs


@pytest.mark.parametrize(("banner", "query"), _same_host_pairs())
def test_a_real_banner_and_query_of_one_host_agree(
    banner: str, query: str, captures_dir: Path
) -> None:
    # Cut names ("NVIDIA RTX 2000 Ada Gene...", "NVIDIA GeForce ..."), MIG tables,
    # Windows, R610's KMD Version: none of it is a disagreement.
    q_text = _read(captures_dir, f"nvidia-smi-q/{query}")
    views = [
        query_view("nvidia-smi-q.txt", parse_smi_query(q_text), q_text),
        banner_view(
            "nvidia-smi.txt", parse_banner(_read(captures_dir, f"nvidia-smi-banner/{banner}"))
        ),
    ]
    assert None not in views
    assert bundle_conflicts([v for v in views if v is not None]) == ()


def test_a_whole_bundle_of_one_host_passes_the_check(
    tmp_path: Path, captures_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = _bundle(
        tmp_path / "bundle",
        {
            "nvidia-smi-q.txt": _read(captures_dir, A40_Q),
            "nvidia-smi.txt": _read(captures_dir, "nvidia-smi-banner/gls-A40x10-550.127.05.txt"),
        },
    )
    code, node = _certify(directory, capsys)
    # Certified; what a bundle without its other files could not show is optional, and the
    # summary counts it as every output does, not as passed.
    assert code == ExitCode.OK
    # (4 of the optional ones: the GPUDirect checks, with no GPUDirect file in the bundle;
    # the host family's swap, unread without the bundle's meminfo.txt, optional as the
    # policy does not forbid swap; it states no other host figure to judge; and
    # network.ports: no HCA files, optional on a PCIe card's node; and the container
    # toolkit, CDI spec and runtime: no nvidia-ctk file, optional where not required)
    assert node["summary"].startswith("10x A40: 27 of 42 checks passed, 15 optional could not")
    (finding,) = _sources_agree(node)
    assert finding["severity"] == "PASS"
    assert "nvidia-smi query and nvidia-smi table agree" in finding["message"]


# ---------------------------------------------------------------- mixed bundles


def test_an_a10_query_next_to_an_h200_banner_is_not_certified(
    tmp_path: Path, captures_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Same driver (550.90.12) on both: only the names and the bus ids tell.
    query = _read(captures_dir, "nvidia-smi-q/gls-A10-550.90.12.txt")
    own_banner = _read(captures_dir, "nvidia-smi-banner/gls-A10-550.90.12.txt")
    code, _ = _certify(
        _bundle(tmp_path / "own", {"nvidia-smi-q.txt": query, "nvidia-smi.txt": own_banner}),
        capsys,
    )
    assert code == ExitCode.OK  # the A10's own banner: certified
    h200_banner = _read(captures_dir, "nvidia-smi-banner/gls-H200-550.90.12.txt")
    directory = _bundle(
        tmp_path / "mixed", {"nvidia-smi-q.txt": query, "nvidia-smi.txt": h200_banner}
    )
    code, node = _certify(directory, capsys)
    assert code == ExitCode.NOT_CERTIFIED
    assert node["verdict"] == "NOT_CERTIFIED"
    assert (
        node["summary"] == "1x A10: 1 required check could not be judged: inventory.sources_agree"
    )
    messages = {f["message"] for f in _sources_agree(node)}
    assert messages == {
        "nvidia-smi-q.txt names NVIDIA A10 but nvidia-smi.txt names NVIDIA H200; " + RECAPTURE,
        "nvidia-smi-q.txt lists GPUs at 00000000:08:00.0 that nvidia-smi.txt does not, and "
        "nvidia-smi.txt lists GPUs at 00000000:03:00.0 that nvidia-smi-q.txt does not; "
        + RECAPTURE,
    }
    assert all(f["severity"] == "UNKNOWN" and f["required"] for f in _sources_agree(node))


def test_a_t4_xml_no_longer_silently_wins_over_an_a10_query(
    tmp_path: Path, captures_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = _bundle(
        tmp_path / "bundle",
        {
            "nvidia-smi-q.xml": _read(captures_dir, "nvidia-smi-xml/telegraf-tesla-t4.xml"),
            "nvidia-smi-q.txt": _read(captures_dir, "nvidia-smi-q/gls-A10-550.90.12.txt"),
        },
    )
    code, node = _certify(directory, capsys)
    assert code == ExitCode.NOT_CERTIFIED
    assert "inventory.sources_agree" in node["summary"]
    by_what = {f["observed"].split(" ")[0]: f["message"] for f in _sources_agree(node)}
    assert by_what["driver_version"] == (
        "nvidia-smi-q.xml says driver 515.105.01 but nvidia-smi-q.txt says driver 550.90.12; "
        + RECAPTURE
    )
    assert "Tesla T4" in by_what["gpu_name"]
    assert "NVIDIA A10" in by_what["gpu_name"]
    assert set(by_what) == {"driver_version", "gpu_name", "pci_bus_id"}


def test_a_banner_missing_a_gpu_of_the_query_is_a_count_conflict(
    tmp_path: Path, captures_dir: Path
) -> None:
    q_text = _read(captures_dir, A40_Q)
    banner = _read(captures_dir, "nvidia-smi-banner/gls-A40x10-550.127.05.txt")
    # The banner's last GPU (three table lines) taken out: nine GPUs against ten.
    lines = banner.splitlines(keepends=True)
    last = max(i for i, line in enumerate(lines) if "00000000:D6:00.0" in line)
    fewer = "".join(lines[:last] + lines[last + 4 :])
    assert len(parse_banner(fewer).gpus) == 9
    (conflict,) = _conflicts_of(tmp_path, {"nvidia-smi-q.txt": q_text, "nvidia-smi.txt": fewer})
    assert conflict.what == "gpu_count"
    assert conflict.detail == (
        "nvidia-smi-q.txt lists 10 GPUs but nvidia-smi.txt lists 9 "
        "(00000000:D6:00.0 missing from nvidia-smi.txt)"
    )
    assert conflict.sources == ("nvidia-smi-q.txt", "nvidia-smi.txt")


# ---------------------------------------------------------------- a query cut short


def _cuts(text: str) -> dict[str, str]:
    """A real 10-GPU -q cut where a capture can end early."""
    sections = [m.start() for m in re.finditer(r"^GPU [0-9A-F]{8}:", text, re.M)]
    fifth_done = sections[5]  # GPU 5's header: GPUs 0..4 whole, nothing of GPU 5
    return {
        "mid GPU 0": text[: text.index("    Temperature\n", sections[0])],
        "between GPU sections": text[:fifth_done],
        "last section dropped": text[: sections[-1]],
        "mid the last section": text[: text.index("    Clocks\n", sections[-1])],
        "on the last Processes header": text[: text.rindex(" : None")].rstrip(),
        "inside the last Processes word": text[: text.rindex("None") + 2],
    }


@pytest.mark.parametrize(
    "where",
    [
        "mid GPU 0",
        "between GPU sections",
        "last section dropped",
        "mid the last section",
        "on the last Processes header",
        "inside the last Processes word",
    ],
)
def test_a_query_cut_anywhere_is_not_certified(
    where: str, tmp_path: Path, captures_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The whole file is certified (test_a_whole_bundle_of_one_host_passes_the_check).
    cut = _cuts(_read(captures_dir, A40_Q))[where]
    directory = _bundle(tmp_path / "bundle", {"nvidia-smi-q.txt": cut})
    code, node = _certify(directory, capsys)
    assert code == ExitCode.NOT_CERTIFIED
    assert "inventory.sources_agree" in node["summary"]
    (finding,) = _sources_agree(node)
    assert finding["severity"] == "UNKNOWN"
    assert finding["message"].startswith("nvidia-smi-q.txt is cut short: ")
    assert finding["message"].endswith(RECAPTURE)


def test_the_truncated_a40_query_names_its_shortfall(tmp_path: Path, captures_dir: Path) -> None:
    text = _read(captures_dir, A40_Q)
    (conflict,) = _conflicts_of(tmp_path, {"nvidia-smi-q.txt": _cuts(text)["last section dropped"]})
    assert conflict == SourceConflict(
        "truncated",
        "nvidia-smi-q.txt is cut short: it declares 10 attached GPUs but holds 9 GPU sections",
        ("nvidia-smi-q.txt",),
    )
    (mid,) = _conflicts_of(tmp_path, {"nvidia-smi-q.txt": _cuts(text)["mid GPU 0"]})
    assert mid.detail == (
        "nvidia-smi-q.txt is cut short: it declares 10 attached GPUs but holds 1 GPU section; "
        "GPU 00000000:4F:00.0 ends before its Processes section"
    )


def test_a_query_cut_after_its_header_is_bad_input(
    tmp_path: Path, captures_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _read(captures_dir, A40_Q)
    directory = _bundle(tmp_path / "bundle", {"nvidia-smi-q.txt": text[: text.index("GPU 0000")]})
    with pytest.raises(CaptureError, match="no GPU section"):
        collect_capture(directory)
    assert main(["certify", "--capture", str(directory), "--burn", "0"]) == ExitCode.BAD_INPUT
    assert capsys.readouterr().err.count("\n") == 1


def test_every_line_where_a_real_query_can_end_early_is_seen(captures_dir: Path) -> None:
    # Whatever line a capture stops after, within the last GPU and at every 100th
    # line before it, the file is cut short (or, before the first GPU, bad input).
    text = _read(captures_dir, A40_Q)
    ends = [m.end() for m in re.finditer(r"\n", text)][:-1]
    last_gpu = text.rindex("\nGPU 0000")
    for end in [e for e in ends if e > last_gpu] + ends[::100]:
        if "\nGPU 0000" not in text[:end]:
            continue
        view = query_view("nvidia-smi-q.txt", parse_smi_query(text[:end]))
        assert view is not None
        assert not view.whole, repr(text[max(0, end - 60) : end])


def test_a_cut_process_list_is_seen(captures_dir: Path) -> None:
    text = _read(captures_dir, "nvidia-smi-q/gpud-8x-rtx4090-535.154.05.txt")
    last_process = text.rindex("        Process ID")
    for end in (text.index("\n", last_process) + 1, text.rindex("            Name")):
        query = parse_smi_query(text[:end])
        assert "ends inside its process list" in query.cut
    assert parse_smi_query(text).cut == ""


def test_trimmed_real_xml_is_not_certified(
    tmp_path: Path, captures_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Real documents closed again after their publisher cut them: well-formed, not whole.
    for name, says in (
        ("telegraf-a100-sxm4-v12.xml", "it declares 4 attached GPUs but holds 1 GPU section"),
        ("telegraf-gtx-1070-ti.xml", '<gpu id="00000000:01:00.0"> has no <processes> element'),
    ):
        directory = _bundle(
            tmp_path / name, {"nvidia-smi-q.xml": _read(captures_dir, f"nvidia-smi-xml/{name}")}
        )
        code, node = _certify(directory, capsys)
        assert code == ExitCode.NOT_CERTIFIED
        assert "inventory.sources_agree" in node["summary"]
        (finding,) = _sources_agree(node)
        assert finding["message"] == f"nvidia-smi-q.xml is cut short: {says}; {RECAPTURE}"


def test_a_query_naming_a_lost_gpu_proves_the_fault(tmp_path: Path, captures_dir: Path) -> None:
    # The second GPU's section replaced by the line nvidia-smi prints for a GPU whose
    # handle fails (its wording as smi_errors reads it): 8 declared, 7 held.
    text = _read(captures_dir, H100_Q)
    second, third = text.index("GPU 00000000:2A:00.0"), text.index("GPU 00000000:3A:00.0")
    lost = "Unable to determine the device handle for GPU0000:2A:00.0: Unknown Error\n"
    (conflict,) = _conflicts_of(tmp_path, {"nvidia-smi-q.txt": text[:second] + lost + text[third:]})
    assert conflict.what == "gpu_lost"
    assert conflict.proves_fault
    assert conflict.detail == (
        "nvidia-smi-q.txt declares 8 attached GPUs but holds 7 GPU sections and says the "
        "driver cannot reach 00000000:2A:00.0"
    )


# ---------------------------------------------------------------- the PCI listing


def _lspci(bus_ids: list[str]) -> str:
    # lspci -n writes a 4-digit domain in lower case: "0000:2a:00.0 0302: 10de:2330 (rev a1)".
    lines = ["0000:00:00.0 0600: 8086:09a2 (rev 04)"]
    lines += [f"{bus[4:].lower()} 0302: 10de:2330 (rev a1)" for bus in bus_ids]
    lines += ["0000:05:00.0 0680: 10de:22a3 (rev a1)"]  # an NVSwitch is no GPU
    return "\n".join(lines) + "\n"


def _h100_bus_ids(captures: Path) -> list[str]:
    return re.findall(
        r"^GPU ([0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.\d)", _read(captures, H100_Q), re.M
    )


def test_an_lspci_listing_of_the_same_gpus_agrees_despite_domain_and_case(
    tmp_path: Path, captures_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bus_ids = _h100_bus_ids(captures_dir)
    assert len(bus_ids) == 8
    directory = _bundle(
        tmp_path / "bundle",
        {"nvidia-smi-q.txt": _read(captures_dir, H100_Q), "lspci-n.txt": _lspci(bus_ids)},
    )
    _, node = _certify(directory, capsys)
    (finding,) = _sources_agree(node)
    assert finding["severity"] == "PASS"
    assert "PCI listing" in finding["message"]


def test_gpus_the_pci_bus_does_not_show_are_a_conflict(tmp_path: Path, captures_dir: Path) -> None:
    bus_ids = _h100_bus_ids(captures_dir)
    other_host = [bus.replace(":00.0", ":01.0") for bus in bus_ids[:2]] + bus_ids[2:]
    files = {"nvidia-smi-q.txt": _read(captures_dir, H100_Q), "lspci-n.txt": _lspci(other_host)}
    (conflict,) = _conflicts_of(tmp_path, files)
    assert conflict.what == "pci_bus_id"
    assert conflict.detail == (
        "nvidia-smi-q.txt lists GPUs at 00000000:18:00.0, 00000000:2A:00.0 that lspci-n.txt "
        "does not show on the PCI bus"
    )
    # A GPU on the bus the driver does not list is a fault inventory.gpu_count fails, not this.
    assert (
        _conflicts_of(tmp_path, {**files, "lspci-n.txt": _lspci([*bus_ids, "00000000:F0:00.0"])})
        == ()
    )


def test_a_sysfs_listing_is_compared_as_lspci_is(tmp_path: Path, captures_dir: Path) -> None:
    bus_ids = _h100_bus_ids(captures_dir)[:7]
    sysfs = "".join(f"{bus[4:].lower()} 0x10de 0x030200\n" for bus in bus_ids)
    (conflict,) = _conflicts_of(
        tmp_path, {"nvidia-smi-q.txt": _read(captures_dir, H100_Q), "pci-devices.txt": sysfs}
    )
    assert conflict.sources == ("nvidia-smi-q.txt", "pci-devices.txt")
    assert "00000000:DB:00.0" in conflict.detail


# ---------------------------------------------------------------- names, views, the judge


@pytest.mark.parametrize(
    ("cut", "full", "same"),
    [
        ("NVIDIA RTX 2000 Ada Gene...", "NVIDIA RTX 2000 Ada Generation", True),
        ("NVIDIA GeForce ...", "NVIDIA GeForce GTX 680", True),
        ("NVIDIA  h100 80GB HBM3", "NVIDIA H100 80GB HBM3", True),
        ("NVIDIA H100 80GB HBM...", "NVIDIA H200", False),
        ("NVIDIA A10", "NVIDIA A100-SXM4-80GB", False),
        ("...", "NVIDIA A10", False),
    ],
)
def test_names_compare_on_what_both_print(cut: str, full: str, same: bool) -> None:
    assert same_name(cut, full) is same
    assert same_name(full, cut) is same


def test_an_error_text_is_no_view(tmp_path: Path, captures_dir: Path) -> None:
    # A banner that printed the driver mismatch lists no GPU and names the library version.
    directory = _bundle(
        tmp_path / "bundle",
        {
            "nvidia-smi-q.txt": _read(captures_dir, A40_Q),
            "nvidia-smi.txt": "Failed to initialize NVML: Driver/library version mismatch\n"
            "NVML library version: 550.54\n",
        },
    )
    system = CaptureSystem(directory)
    assert [view.file for view in system.views()] == ["nvidia-smi-q.txt"]
    assert system.conflicts() == ()
    assert pci_view("lspci-n.txt", []).gpus == ()


def test_the_check_fails_only_what_the_files_prove() -> None:
    facts = NodeFacts(
        hostname="n",
        source="capture",
        source_conflicts=(
            SourceConflict("driver_version", "a.txt says 1 but b.txt says 2", ("a.txt", "b.txt")),
            SourceConflict("gpu_lost", "a.txt says GPU X is lost", ("a.txt",), proves_fault=True),
        ),
    )
    findings = consistency.check(facts, Policy(), None)
    assert [(f.check, f.severity, f.required) for f in findings] == [
        (CHECK, Severity.UNKNOWN, True),
        (CHECK, Severity.FAIL, True),
    ]
    assert findings[0].message == f"a.txt says 1 but b.txt says 2; {RECAPTURE}"
    assert findings[0].observed == "driver_version (a.txt, b.txt)"
    assert "reboot the node" in findings[1].message


def test_nothing_to_compare_says_nothing() -> None:
    # A live host or a scenario has one view; so has a capture of one file.
    for source in ("live", "simulate", "capture"):
        assert consistency.check(NodeFacts(hostname="n", source=source), Policy(), None) == []


def test_a_scenario_captured_then_certified_agrees_with_itself(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "bundle"
    with redirect_stdout(io.StringIO()):
        assert main(["capture", "--simulate", "healthy-8x-h100-sxm", str(directory)]) == 0
    _, node = _certify(directory, capsys)
    (finding,) = _sources_agree(node)
    assert finding["severity"] == "PASS"
    assert finding["observed"] == "nvidia-smi table, PCI listing"
