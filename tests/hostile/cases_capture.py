"""``certify --capture DIR`` on bundles of real captures with one thing changed; ``capture DIR``.

The base bundle (data_files.bundle) is a whole, healthy A10 capture that certifies
under the no-burn policy (exit 0). Every change below makes it contradictory,
truncated or implausible, and a wrong verdict is worse than an error: 1 or 2, never 0.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path

from tests.hostile.cases import Case, Outcome, case
from tests.hostile.data_files import (
    A40X10_QUERY,
    CLEAN_DMESG,
    H200_BANNER,
    T4_XML,
    Setup,
    Workspace,
    bundle,
    combine,
    corpus,
    cut_at,
    drop_last_gpu_section,
    meta,
    mkdir,
    once,
    scenario,
    symlink,
    write,
    xid79_dmesg,
)

CERTIFY = (
    "certify",
    "--capture",
    "{tmp}/bundle",
    "--policy",
    "{tmp}/policy.yml",
    "--db",
    "{tmp}/history.db",
)
NEVER_CERTIFIED = frozenset({1, 2})
QUERY = "nvidia-smi-q.txt"
BANNER = "nvidia-smi.txt"
XML = "nvidia-smi-q.xml"


def _value(
    label: str, pattern: str, replacement: str, *, exits: int | frozenset[int] = NEVER_CERTIFIED
) -> Case:
    """One implausible value in the -q: never certified on it (a parser may refuse it: 2)."""
    return case(
        f"capture-implausible-{label}",
        *CERTIFY,
        exit=exits,
        setup=bundle({QUERY: once(pattern, replacement)}),
    )


def _nothing_escaped(tmp: Path, _outcome: Outcome) -> None:
    strays = sorted(p.name for p in tmp.parent.iterdir() if p.name.startswith("escape"))
    assert not strays, f"a host name wrote outside the report dir: {strays}"
    assert not list(tmp.glob("escape*")), "a host name wrote outside the report dir"


XXE_XML = (
    '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log [<!ENTITY leak SYSTEM "file:///etc/passwd">]>\n'
    "<nvidia_smi_log><driver_version>&leak;</driver_version><attached_gpus>1</attached_gpus>"
    "</nvidia_smi_log>\n"
)


def _xml_laughs() -> str:
    entities = ['<!ENTITY lol0 "lol">']
    for level in range(1, 10):
        entities.append(f'<!ENTITY lol{level} "{("&lol" + str(level - 1) + ";") * 10}">')
    doctype = "<!DOCTYPE nvidia_smi_log [" + "".join(entities) + "]>"
    body = "<nvidia_smi_log><driver_version>&lol9;</driver_version></nvidia_smi_log>"
    return f'<?xml version="1.0"?>\n{doctype}\n{body}\n'


_DMESG_WITH_XID = xid79_dmesg  # called at setup time: the corpus is read then


def _fifo(relative: str) -> Setup:
    """A FIFO under the case's directory: opening it to read would wait for a writer."""

    def setup(ws: Workspace) -> None:
        os.mkfifo(ws.tmp / relative)

    return setup


def _gpu_sections(count: int) -> Callable[[str], str]:
    """An edit of the -q: its GPU section given ``count`` times."""

    def edit(text: str) -> str:
        start = re.search(r"^GPU [0-9A-Fa-f]{8}:", text, flags=re.M)
        if start is None:
            raise AssertionError("the base capture has no GPU section")
        return text[: start.start()] + text[start.start() :] * count

    return edit


def _random_text(size: int) -> str:
    """Bytes no log holds, the same each run, as a file read with errors replaced holds them."""
    # Hash output: bytes of every value, the same each run.
    blocks = (hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(size // 32))
    return b"".join(blocks).decode("latin-1")


def _journal_of(host: str) -> str:
    """The clean log's lines as ``journalctl -k`` prints them on ``host``."""
    return "".join(
        f"Jun 25 09:{minute:02d}:00 {host} kernel: {line}\n"
        for minute, line in enumerate(CLEAN_DMESG.splitlines())
    )


# Real outputs of other machines (their sources: tests/fixtures/*/SOURCES.md, captures).
FIXTURES = Path(__file__).parent.parent / "fixtures"
DCGM_8X_JSON = "dcgmi/repo-NVIDIA-DCGM-JsonResultTests-8xgpu-dcgm3.1.0-json-real-output.json"
DCGM_4X_TEXT = (
    "dcgmi/issue-DCGM253-4xgpu-26b9-dcgm4.2.3-diag-text-metadata-software-per-gpu-TRUNCATED.txt"
)
NVB_8X_README = "nvbandwidth/repo-NVIDIA-nvbandwidth-README-8xgpu-d2d-memcpy-write-ce-276GBps.txt"
NVB_1X_A100 = (
    "nvbandwidth/issue-nvbandwidth42-a100-sxm4-40gb-560.35.05-v0.8-h2d-memcpy-sm-b512-pass.txt"
)

NVB_GB200_MULTINODE = (
    "nvbandwidth/cloud-native-docs-dra-cds-2x4xgb200-570.124.06-v0.7-multinode-d2d-read-ce.txt"
)

NCCL_8X_H200 = (
    "nccl-tests/WEAKPROV-codeidx-19124581599-8xh200-ndv5-nccl2.19.3-all_reduce_perf-8G-single-size"
    "-pass.txt"
)


def _fixture(relative: str) -> str:
    return (FIXTURES / relative).read_text(encoding="utf-8")


# nvbandwidth -j's head as NVIDIA/nvbandwidth pull 54 shows it: an 8-rank multinode run
# over two GB200 trays lists only the first rank's host's 4 devices, each with its host.
PR54_DEVICES = [
    f"{index}: NVIDIA GB200 ({domain}:06:00): (n179-067-085)"
    for index, domain in enumerate(("00000008", "00000009", "00000018", "00000019"))
]


def _nvbandwidth_json(devices: list[str] | None, name: str, rows: list[list[str]]) -> str:
    """nvbandwidth -j output as its json_output.cpp writes it: one passed testcase."""
    testcase = {
        "bandwidth_description": "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)",
        "bandwidth_matrix": rows,
        "name": name,
        "status": "Passed",
        "sum": sum(float(cell) for row in rows for cell in row if cell != "N/A"),
    }
    root = {
        "CUDA Runtime Version": 13000,
        "Driver Version": "580.105.08",
        "GPU Device list": devices,
        "git_version": "v0.8",
        "testcases": [testcase],
    }
    return json.dumps({"nvbandwidth": root}, indent=8)


def _gb200_rows() -> list[list[str]]:
    """The real 8x8 matrix of the two-tray GB200 text run (its fixture), as -j writes cells."""
    lines = _fixture(NVB_GB200_MULTINODE).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("memcpy CE GPU")) + 2
    return [line.split()[1:] for line in lines[start : start + 8]]


def _dcgm_gpu0_twice() -> str:
    """The real 8-GPU DCGM result with every GPU id made 0: GPU 0 reported again and again."""
    text = _fixture(DCGM_8X_JSON).replace('"0,1,2,3,4,5,6,7"', '"0,0"')
    return re.sub(r'("gpu_ids" : )[1-7],', r"\g<1>0,", text)


def _nvlink_blocks(uuids: list[str]) -> str:
    """``nvidia-smi nvlink -s`` for A40s: one block per UUID, two links up."""
    blocks = []
    for index, uuid in enumerate(uuids):
        shown = f" (UUID: {uuid})" if uuid else ""
        blocks.append(
            f"GPU {index}: NVIDIA A40{shown}\n\t Link 0: 14.062 GB/s\n\t Link 1: 14.062 GB/s\n"
        )
    return "".join(blocks)


def _nvlink_of_query(*, swap: bool) -> Callable[[str], str]:
    """The nvlink file of the A40 query's own GPUs, GPUs 0 and 1 swapped when asked."""

    def edit(_text: str) -> str:
        uuids = re.findall(r"GPU UUID\s+: (GPU-[0-9a-f-]+)", corpus(A40X10_QUERY))
        if swap:
            uuids[0], uuids[1] = uuids[1], uuids[0]
        return _nvlink_blocks(uuids)

    return edit


CASES: tuple[Case, ...] = (
    # Controls: the whole capture certifies, and a recent Xid 79 is caught.
    case("capture-base-certifies", *CERTIFY, exit=0, setup=bundle()),
    case(
        "capture-base-report-dir",
        *CERTIFY,
        "--report-dir",
        "{tmp}/rep",
        exit=0,
        setup=bundle(),
        exists=("rep/report.json", "rep/certificates/*.json"),
    ),
    case("capture-a40x10-whole-certifies", *CERTIFY, exit=0, setup=bundle(base="a40x10")),
    case(
        "capture-xid79-in-window",
        *CERTIFY,
        exit=1,
        setup=bundle({"dmesg.txt": lambda _t: _DMESG_WITH_XID(89000.0)}),
    ),
    # Contradictory files: the report names the files that disagree.
    case(
        "capture-a10-query-next-to-h200-banner",
        *CERTIFY,
        exit=1,
        out=(QUERY, BANNER),
        setup=bundle({BANNER: lambda _t: corpus(H200_BANNER)}),
    ),
    case(
        "capture-t4-xml-next-to-a10-query",
        *CERTIFY,
        exit=1,
        out=(XML, QUERY),
        setup=bundle({XML: lambda _t: corpus(T4_XML)}),
    ),
    case(
        "capture-banner-driver-differs",
        *CERTIFY,
        exit=1,
        out=(QUERY, BANNER),
        setup=bundle({BANNER: once(r"Driver Version: 550\.90\.12", "Driver Version: 550.90.07")}),
    ),
    case(
        "capture-banner-bus-id-differs",
        *CERTIFY,
        exit=1,
        out=(QUERY, BANNER),
        setup=bundle({BANNER: once(r"00000000:08:00\.0", "00000000:09:00.0")}),
    ),
    case(
        "capture-lspci-shows-two-gpus",
        *CERTIFY,
        exit=1,
        setup=bundle(
            {
                "lspci-n.txt": (
                    "0000:08:00.0 0302: 10de:2236 (rev a1)\n0000:09:00.0 0302: 10de:2236 (rev a1)\n"
                )
            }
        ),
    ),
    case(
        "capture-lspci-agrees",
        *CERTIFY,
        exit=0,
        setup=bundle(
            {"lspci-n.txt": "0000:00:00.0 0600: 8086:1237\n0000:08:00.0 0302: 10de:2236 (rev a1)\n"}
        ),
    ),
    # Truncated outputs: never certified from a part of a file.
    case(
        "capture-query-declares-more-gpus",
        *CERTIFY,
        exit=NEVER_CERTIFIED,
        out=QUERY,
        setup=bundle({QUERY: once(r"^(Attached GPUs\s+): 1$", r"\1: 2"), BANNER: None}),
    ),
    case(
        "capture-a40x10-query-nine-of-ten-sections",
        *CERTIFY,
        exit=NEVER_CERTIFIED,
        out=QUERY,
        setup=bundle({QUERY: drop_last_gpu_section}, base="a40x10"),
    ),
    case(
        "capture-a40x10-query-cut-mid-gpu",
        *CERTIFY,
        exit=NEVER_CERTIFIED,
        out=QUERY,
        setup=bundle(
            {QUERY: cut_at(r"^GPU 00000000:CE:00\.0\n(?:.*\n){40}", keep_match=True)}, base="a40x10"
        ),
    ),
    case(
        "capture-query-cut-mid-gpu",
        *CERTIFY,
        exit=NEVER_CERTIFIED,
        out=QUERY,
        setup=bundle({QUERY: cut_at(r"^    ECC Errors$"), BANNER: None}),
    ),
    case(
        "capture-query-cut-after-header",
        *CERTIFY,
        exit=NEVER_CERTIFIED,
        out=QUERY,
        setup=bundle({QUERY: cut_at(r"^GPU 00000000:08:00\.0$"), BANNER: None}),
    ),
    case(
        "capture-query-cut-mid-value",
        *CERTIFY,
        exit=NEVER_CERTIFIED,
        out=QUERY,
        setup=bundle(
            {QUERY: cut_at(r"^        GPU Current Temp\s+: 3", keep_match=True), BANNER: None}
        ),
    ),
    case(
        "capture-query-cut-mid-gpu-banner-present",
        *CERTIFY,
        exit=NEVER_CERTIFIED,
        out=QUERY,
        setup=bundle({QUERY: cut_at(r"^    Temperature$")}),
    ),
    case(
        "capture-xml-cut-mid-gpu",
        *CERTIFY,
        exit=NEVER_CERTIFIED,
        out=XML,
        setup=bundle(
            {XML: lambda _t: corpus(T4_XML)[: len(corpus(T4_XML)) // 2], QUERY: None, BANNER: None}
        ),
    ),
    case(
        "capture-query-binary",
        *CERTIFY,
        exit=NEVER_CERTIFIED,
        setup=bundle({QUERY: lambda _t: bytes(range(256)).decode("latin-1") * 8, BANNER: None}),
    ),
    case(
        "capture-query-empty",
        *CERTIFY,
        exit=NEVER_CERTIFIED,
        setup=bundle({QUERY: "", BANNER: None}),
    ),
    case(
        "capture-query-is-nvcc-output",
        *CERTIFY,
        exit=NEVER_CERTIFIED,
        setup=bundle(
            {QUERY: lambda _t: corpus("nvcc/repo-ngc-test-nvcc-11.6.55.txt"), BANNER: None}
        ),
    ),
    case(
        "capture-query-is-a-directory",
        *CERTIFY,
        exit=NEVER_CERTIFIED,
        setup=combine(bundle({QUERY: None}), mkdir("bundle/nvidia-smi-q.txt")),
    ),
    case(
        "capture-query-links-to-dev-zero",
        *CERTIFY,
        exit=2,  # a link is never followed: refused unread, never a hang
        err=("nvidia-smi-q.txt is a symbolic link", "copy the file in its place"),
        setup=combine(
            bundle({QUERY: None, BANNER: None}), symlink("bundle/nvidia-smi-q.txt", "/dev/zero")
        ),
        child=True,
        timeout_s=30,
    ),
    # A bundle is made by whoever captured it; root reads it. A link to a file of the
    # controller (here a stand-in for /etc/shadow) must not carry a line of it into
    # an error message or a report.
    *(
        case(
            f"capture-{name.split('.')[0]}-links-to-a-secret-of-the-controller",
            *CERTIFY,
            exit=2,
            err=(f"{name} is a symbolic link",),
            forbid=("$6$rounds", "gpuready-secret-hash"),
            setup=combine(
                bundle({QUERY: None, BANNER: None, name: None}),
                write("shadow", "root:$6$rounds=5000$gpuready-secret-hash:19000:0:99999:7:::\n"),
                symlink(f"bundle/{name}", "{tmp}/shadow"),
            ),
        )
        for name in ("nvidia-smi-q.txt", "dmesg.txt", "meta.json")
    ),
    case(
        "capture-xml-external-entity",
        *CERTIFY,
        exit=NEVER_CERTIFIED,
        forbid="root:x:0:0",
        setup=bundle({XML: XXE_XML, QUERY: None, BANNER: None}),
    ),
    case(
        "capture-xml-billion-laughs",
        *CERTIFY,
        exit=NEVER_CERTIFIED,
        setup=bundle({XML: _xml_laughs(), QUERY: None, BANNER: None}),
        child=True,
        timeout_s=30,
    ),
    # Physically implausible values: "not measured", which never certifies.
    # The issue's own two: the thermal margin is then unknown, and it is required.
    _value("temperature-minus-273", r"(GPU Current Temp\s+): 33 C", r"\1: -273 C", exits=1),
    _value("temperature-nan", r"(GPU Current Temp\s+): 33 C", r"\1: nan C", exits=1),
    _value("temperature-99999", r"(GPU Current Temp\s+): 33 C", r"\1: 99999 C"),
    _value("shutdown-temperature-minus-1000", r"(GPU Shutdown Temp\s+): 101 C", r"\1: -1000 C"),
    _value(
        "power-draw-1e9",
        r"(GPU Power Readings\n\s+Power Draw\s+): 15\.65 W",
        r"\1: 1000000000.00 W",
    ),
    _value("power-limit-negative", r"(Current Power Limit\s+): 150\.00 W", r"\1: -150.00 W"),
    _value("memory-total-zero", r"(FB Memory Usage\n\s+Total\s+): 23028 MiB", r"\1: 0 MiB"),
    _value(
        "memory-used-over-total",
        r"(FB Memory Usage\n(?:.*\n){2}\s+Used\s+): 1 MiB",
        r"\1: 99999 MiB",
    ),
    _value(
        "ecc-volatile-negative",
        r"(        Volatile\n(?:            .*\n){4}            DRAM Uncorrectable\s+): 0",
        r"\1: -5",
    ),
    _value(
        "remapped-rows-negative",
        r"(Remapped Rows\n(?:.*\n)\s+Uncorrectable Error\s+): 0",
        r"\1: -1",
    ),
    _value("pcie-gen-99", r"(PCIe Generation\n\s+Max\s+): 4", r"\1: 99"),
    _value("pcie-width-999", r"(Link Width\n\s+Max\s+): 16x", r"\1: 999x"),
    _value("max-sm-clock-huge", r"(Max Clocks\n(?:.*\n)\s+SM\s+): 1695 MHz", r"\1: 99999999 MHz"),
    # The kernel log's window: an uptime that hides an Xid never certifies.
    case(
        "capture-uptime-1e12-hides-xid79",
        *CERTIFY,
        exit=1,
        setup=bundle(
            {"dmesg.txt": lambda _t: _DMESG_WITH_XID(89000.0), "meta.json": meta(uptime_s=1e12)}
        ),
    ),
    case(
        "capture-uptime-nan-with-xid79",
        *CERTIFY,
        exit=NEVER_CERTIFIED,
        setup=bundle(
            {
                "dmesg.txt": lambda _t: _DMESG_WITH_XID(89000.0),
                "meta.json": meta(uptime_s=float("nan")),
            }
        ),
    ),
    case(
        "capture-uptime-infinite-with-xid79",
        *CERTIFY,
        exit=NEVER_CERTIFIED,
        setup=bundle(
            {
                "dmesg.txt": lambda _t: _DMESG_WITH_XID(89000.0),
                "meta.json": meta(uptime_s=float("inf")),
            }
        ),
    ),
    case(
        "capture-uptime-negative-with-xid79",
        *CERTIFY,
        exit=1,
        setup=bundle(
            {"dmesg.txt": lambda _t: _DMESG_WITH_XID(89000.0), "meta.json": meta(uptime_s=-5.0)}
        ),
    ),
    case(
        "capture-uptime-text-with-xid79",
        *CERTIFY,
        exit=1,
        setup=bundle(
            {
                "dmesg.txt": lambda _t: _DMESG_WITH_XID(89000.0),
                "meta.json": meta(uptime_s="a while"),
            }
        ),
    ),
    case(
        "capture-xid-stamped-after-uptime",
        *CERTIFY,
        exit=1,
        setup=bundle(
            {"dmesg.txt": lambda _t: _DMESG_WITH_XID(89000.0), "meta.json": meta(uptime_s=100.0)}
        ),
    ),
    case(
        "capture-meta-duplicate-uptime-with-xid79",
        *CERTIFY,
        exit=NEVER_CERTIFIED,
        setup=bundle(
            {
                "dmesg.txt": lambda _t: _DMESG_WITH_XID(89000.0),
                "meta.json": '{"hostname": "a10-node", "uptime_s": 90000.0, "uptime_s": 1e12}\n',
            }
        ),
    ),
    case(
        "capture-no-meta-xid-counts",
        *CERTIFY,
        exit=1,
        setup=bundle({"dmesg.txt": lambda _t: _DMESG_WITH_XID(89000.0), "meta.json": None}),
    ),
    case(
        "capture-captured-at-garbage-with-xid79",
        *CERTIFY,
        exit=1,
        setup=bundle(
            {
                "dmesg.txt": lambda _t: _DMESG_WITH_XID(89000.0),
                "meta.json": meta(captured_at="yesterday"),
            }
        ),
    ),
    case("capture-empty-dmesg", *CERTIFY, exit=1, setup=bundle({"dmesg.txt": ""})),
    # Measurement files of another machine beside the A10 (issue 30): no PASS for a GPU
    # the node lacks, no figure silently dropped.
    # A real "GPU is lost" (tests/fixtures/nvidia-smi-errors/SOURCES.md): a hardware fault.
    case(
        "capture-banner-gpu-is-lost",
        *CERTIFY,
        exit=1,
        out=("00000000:02:00.0", "reboot the node"),
        forbid=("nothing to certify", "GPUs cannot be inspected"),
        setup=bundle(
            {
                QUERY: None,
                BANNER: lambda _t: _fixture("nvidia-smi-errors/issue-OWOD81-gpu-is-lost.txt"),
            }
        ),
    ),
    case(
        "capture-dcgm-of-8-gpus-beside-1",
        *CERTIFY,
        exit=1,
        out=("dcgmi-diag.json", "does not list"),
        setup=bundle({"dcgmi-diag.json": lambda _t: _fixture(DCGM_8X_JSON)}),
    ),
    case(
        "capture-dcgm-text-of-4-gpus-beside-1",
        *CERTIFY,
        exit=1,
        out=("dcgmi-diag.txt", "does not list"),
        setup=bundle({"dcgmi-diag.txt": lambda _t: _fixture(DCGM_4X_TEXT)}),
    ),
    case(
        "capture-dcgm-gpu-0-twice",
        *CERTIFY,
        exit=1,
        out=("reports GPU 0", "not one run"),
        setup=bundle({"dcgmi-diag.json": lambda _t: _dcgm_gpu0_twice()}),
    ),
    case(
        "capture-nvbandwidth-of-8-gpus-beside-1",
        *CERTIFY,
        exit=1,
        out=("nvbandwidth.txt", "lists 1 GPU"),
        setup=bundle({"nvbandwidth.txt": lambda _t: corpus(NVB_8X_README)}),
    ),
    case(
        "capture-nvbandwidth-other-bus",
        *CERTIFY,
        exit=1,
        out=("nvbandwidth.txt", "00000000:99:00.0"),
        setup=bundle({"nvbandwidth.txt": lambda _t: corpus(NVB_1X_A100)}),
    ),
    case(
        "capture-nvbandwidth-gb200-multinode",
        *CERTIFY,
        exit=frozenset({0, 1}),
        out=("multi-node run (8 GPUs on 2 hosts)", "not a one-node figure"),
        forbid="no device_to_device testcase",
        setup=bundle({"nvbandwidth.txt": lambda _t: _fixture(NVB_GB200_MULTINODE)}),
    ),
    case(
        "capture-nvbandwidth-json-of-another-host",
        *CERTIFY,
        exit=1,
        out=("nvbandwidth.json measured the GPUs of n179-067-085", "the bundle is of a10-node"),
        setup=bundle(
            {
                "nvbandwidth.json": lambda _t: _nvbandwidth_json(
                    ["0: NVIDIA A10 (00000000:07:00): (n179-067-085)"],
                    "host_to_device_memcpy_ce",
                    [["24.51"]],
                )
            }
        ),
    ),
    case(
        "capture-nvbandwidth-json-gb200-multinode",
        *CERTIFY,
        exit=frozenset({0, 1}),
        out=("multi-node run (8 GPUs on several hosts)", "not a one-node figure"),
        forbid=("lists 1 GPU", "measured the GPUs of"),
        setup=bundle(
            {
                "nvbandwidth.json": lambda _t: _nvbandwidth_json(
                    PR54_DEVICES, "multinode_device_to_device_memcpy_write_ce", _gb200_rows()
                )
            }
        ),
    ),
    case(
        "capture-nvbandwidth-json-device-list-null",
        *CERTIFY,
        exit=frozenset({0, 1}),
        # v0.9 and v0.10 write null whatever the GPU count (NVIDIA/nvbandwidth issue 66):
        # the matrix, one column, still says how many GPUs were measured
        forbid=("lists 1 GPU", "cannot be read", "unreadable"),
        setup=bundle(
            {
                "nvbandwidth.json": lambda _t: _nvbandwidth_json(
                    None, "host_to_device_memcpy_ce", [["24.51"]]
                )
            }
        ),
    ),
    case(
        "capture-nccl-of-another-8-gpu-host",
        *CERTIFY,
        exit=1,
        out=("all_reduce_perf.txt", "lists 1 GPU", "test-h200-dsvm"),
        setup=bundle({"all_reduce_perf.txt": lambda _t: corpus(NCCL_8X_H200)}),
    ),
    case(
        "capture-nvlink-uuids-swapped",
        *CERTIFY,
        exit=1,
        out=("nvidia-smi-nvlink-s.txt", "calls"),
        setup=bundle({"nvidia-smi-nvlink-s.txt": _nvlink_of_query(swap=True)}, base="a40x10"),
    ),
    case(
        "capture-nvlink-uuids-agree",
        *CERTIFY,
        exit=0,
        setup=bundle({"nvidia-smi-nvlink-s.txt": _nvlink_of_query(swap=False)}, base="a40x10"),
    ),
    case(
        "capture-nvlink-of-more-gpus",
        *CERTIFY,
        exit=1,
        out=("nvidia-smi-nvlink-s.txt", "lists 1 GPU"),
        setup=bundle({"nvidia-smi-nvlink-s.txt": lambda _t: _nvlink_blocks(["", ""])}),
    ),
    # A dmesg.txt that is no kernel log proves nothing about Xids (issue 30).
    case(
        "capture-dmesg-nul-bytes",
        *CERTIFY,
        exit=1,
        out="not a kernel log",
        setup=bundle({"dmesg.txt": "\x00" * 65536}),
    ),
    case(
        "capture-dmesg-random-bytes",
        *CERTIFY,
        exit=1,
        out="not a kernel log",
        setup=bundle({"dmesg.txt": lambda _t: _random_text(65536)}),
    ),
    case(
        "capture-dmesg-prose",
        *CERTIFY,
        exit=1,
        out="not a kernel log",
        setup=bundle({"dmesg.txt": "Dear operator,\nall GPUs are fine.\nNo Xid here.\n"}),
    ),
    case(
        "capture-journal-not-a-log-either",
        *CERTIFY,
        exit=1,
        out="not a kernel log",
        setup=bundle({"dmesg.txt": "prose\n", "journalctl.txt": "more prose\n"}),
    ),
    case(
        "capture-kernel-log-of-another-host",
        *CERTIFY,
        exit=1,
        out=("worker4", "a10-node"),
        setup=bundle({"dmesg.txt": lambda _t: _journal_of("worker4")}),
    ),
    case(
        "capture-meta-not-json",
        *CERTIFY,
        exit=2,
        err="meta.json",
        setup=bundle({"meta.json": "{uptime: 5\n"}),
    ),
    case(
        "capture-meta-is-a-list",
        *CERTIFY,
        exit=2,
        err="meta.json",
        setup=bundle({"meta.json": "[90000]\n"}),
    ),
    case(
        "capture-nvcc-garbage",
        *CERTIFY,
        exit=2,
        err="nvcc.txt",
        setup=bundle({"nvcc.txt": "command not found\n"}),
    ),
    case(
        "capture-cudnn-header-garbage",
        *CERTIFY,
        exit=2,
        err="cudnn_version.h",
        setup=bundle({"cudnn_version.h": "#pragma once\n"}),
    ),
    case(
        "capture-proc-version-garbage",
        *CERTIFY,
        exit=2,
        err="proc-driver-version.txt",
        setup=bundle({"proc-driver-version.txt": "no such file\n"}),
    ),
    # A host name that is a path must not write outside the report dir.
    case(
        "capture-hostname-is-a-path",
        *CERTIFY,
        "--report-dir",
        "{tmp}/rep",
        exit={0, 2},
        setup=bundle({"meta.json": meta(hostname="../../escape")}),
        check=_nothing_escaped,
    ),
    case(
        "capture-directory-missing",
        "certify",
        "--capture",
        "{tmp}/nobundle",
        "--db",
        "{tmp}/history.db",
        exit=2,
        err="nobundle",
    ),
    case(
        "capture-directory-empty",
        "certify",
        "--capture",
        "{tmp}/emptybundle",
        "--db",
        "{tmp}/history.db",
        exit=2,
        err="emptybundle",
        setup=mkdir("emptybundle"),
    ),
    case(
        "capture-directory-is-a-file",
        "certify",
        "--capture",
        "{tmp}/afile",
        "--db",
        "{tmp}/history.db",
        exit=2,
        err="afile",
        setup=write("afile", "not a bundle\n"),
    ),
    # `gpuready capture DIR`
    case(
        "capture-cmd-simulated",
        "capture",
        "--simulate",
        "healthy-8x-h100-sxm",
        "{tmp}/c",
        exit=0,
        exists=("c/meta.json", "c/nvidia-smi.txt", "c/dmesg.txt"),
    ),
    case(
        "capture-cmd-this-machine",
        "capture",
        "{tmp}/c",
        exit=0,
        exists=("c/meta.json", "c/hostname.txt"),
    ),
    case(
        "capture-cmd-over-an-old-bundle",
        "capture",
        "--simulate",
        "healthy-8x-h100-sxm",
        "{tmp}/bundle",
        exit=0,
        setup=bundle(),
        exists="bundle/meta.json",
    ),
    case("capture-cmd-empty-directory", "capture", "", exit=2, err="directory"),
    case(
        "capture-cmd-into-a-file",
        "capture",
        "{tmp}/afile",
        exit=2,
        err="afile",
        setup=write("afile", "x\n"),
    ),
    case(
        "capture-cmd-under-a-file",
        "capture",
        "{tmp}/afile/sub",
        exit={2, 3},
        err="afile",
        setup=write("afile", "x\n"),
    ),
    case(
        "capture-cmd-unknown-scenario",
        "capture",
        "--simulate",
        "nope",
        "{tmp}/c",
        exit=2,
        err="nope",
        absent="c",
    ),
    case(
        "capture-cmd-empty-scenario",
        "capture",
        "--simulate",
        "",
        "{tmp}/c",
        exit=2,
        err="--simulate",
        absent="c",
    ),
    case(
        "capture-cmd-broken-scenario-file",
        "capture",
        "--simulate",
        "{tmp}/scenario.json",
        "{tmp}/c",
        exit=2,
        err="scenario.json",
        setup=scenario(raw="{not json"),
        absent="c",
    ),
    case("capture-cmd-no-directory", "capture", exit=2, err="DIRECTORY"),
    case(
        "capture-cmd-two-directories", "capture", "{tmp}/a", "{tmp}/b", exit=2, err="extra argument"
    ),
    # Bounds before parsing (validator.limits): refused at the bound, in seconds.
    case(
        "capture-dmesg-is-a-fifo",
        *CERTIFY,
        exit=2,
        err=("dmesg.txt", "is a FIFO"),
        setup=combine(bundle({"dmesg.txt": None}), _fifo("bundle/dmesg.txt")),
        child=True,
        timeout_s=30,
    ),
    case(
        "capture-query-65-gpu-sections",
        *CERTIFY,
        exit=2,
        err=("nvidia-smi-q.txt", "65 GPU sections", "at most 64"),
        setup=bundle({QUERY: _gpu_sections(65), BANNER: None}),
        child=True,
        timeout_s=30,
    ),
    case(
        "capture-query-over-16-mib",
        *CERTIFY,
        exit=2,
        err=("nvidia-smi-q.txt", "larger than the 16 MiB"),
        setup=bundle({QUERY: lambda text: text + "x" * (16 << 20)}),
        child=True,
        timeout_s=30,
    ),
    case(
        "capture-nvbandwidth-json-nested-deep",
        *CERTIFY,
        exit=2,
        err="nvbandwidth.json",
        setup=bundle({"nvbandwidth.json": "[" * 200_000 + "]" * 200_000}),
        child=True,
        timeout_s=30,
    ),
)
