"""The bundle's three sysfs records written by one helper, byte for byte as before.

``_old_*`` are the recorders as they stood before validator.node.capture.tree_record
(commit 0ffc30f), kept here as the reference: each family's record of the same
tree must not change by a byte.
"""

from __future__ import annotations

import datetime
import fnmatch
import posixpath
from collections.abc import Callable, Sequence

import pytest

from validator.model import IB_ERROR_COUNTERS, Unavailable
from validator.node.capture.gpudirect_record import record_iommu
from validator.node.capture.host_capture import record_nvme_tree
from validator.node.capture.ib_sysfs_record import record_infiniband
from validator.node.capture.tree_record import record_tree
from validator.node.gpudirect_probe import IOMMU_GROUP_TYPES, IOMMU_GROUPS_READ, IOMMU_UNITS
from validator.node.network_probe import HCA_FILES, PORT_FILES
from validator.node.system import CommandResult, NotRecordedError, System
from validator.node.system_facts import read_file

IB = "/sys/class/infiniband"
Recorder = Callable[[System], "tuple[str, None] | str | tuple[str, str | None]"]


class TreeSystem:
    """A host that is only files (path: text; a dict for one that cannot be read)."""

    def __init__(self, files: dict[str, object], missing: tuple[str, ...] = ()) -> None:
        self.files = files
        self.missing = missing  # patterns whose glob a re-captured bundle lacks
        dirs = set()
        for path in files:
            parts = path.split("/")
            dirs.update("/".join(parts[:end]) for end in range(2, len(parts)))
        self.dirs = dirs

    def hostname(self) -> str:
        return "tree"

    def read_text(self, path: str) -> str | None:
        text = self.files.get(path)
        if isinstance(text, dict):
            raise PermissionError(13, "Permission denied", path)
        return text if isinstance(text, str) else None

    def glob(self, pattern: str) -> list[str]:
        if pattern in self.missing:
            raise NotRecordedError(f"{pattern} not recorded")
        wanted = pattern.split("/")
        found = {
            path
            for path in (*self.files, *self.dirs)
            if len(path.split("/")) == len(wanted)
            and all(fnmatch.fnmatchcase(a, b) for a, b in zip(path.split("/"), wanted))
        }
        return sorted(found)

    def which(self, name: str) -> str | None:
        return None

    def run(self, argv: Sequence[str], timeout_s: float = 30.0) -> CommandResult:
        return CommandResult(rc=127, stdout="")

    def now(self) -> datetime.datetime:
        return datetime.datetime(2026, 12, 7, tzinfo=datetime.timezone.utc)


# ---------------------------------------------------------------- the recorders before


def _old_tree_line(path: str, value: str) -> str:
    return f"{path}\t{' '.join(value.split())}\n"


def _old_record_infiniband(system: System) -> tuple[str, None] | str:
    def lines_of(paths: list[str]) -> list[str]:
        out = []
        for path in paths:
            text = read_file(system, path)
            if not isinstance(text, Unavailable):
                out.append(_old_tree_line(path, text))
        return out

    try:
        lines: list[str] = []
        for device in system.glob(f"{IB}/*"):
            lines += lines_of([f"{device}/{name}" for name in HCA_FILES])
            lines += [_old_tree_line(net, "") for net in system.glob(f"{device}/device/net/*")]
            for port in system.glob(f"{device}/ports/*"):
                if not posixpath.basename(port).isdigit():
                    continue
                files = [f"{port}/{name}" for name in PORT_FILES]
                files += [f"{port}/counters/{name}" for name in IB_ERROR_COUNTERS]
                lines += lines_of(files)
    except NotRecordedError as exc:
        return f"skipped: {exc}"
    return "".join(lines), None


def _old_record_nvme_tree(system: System) -> tuple[str, None] | str:
    try:
        controllers = system.glob("/sys/class/nvme/nvme*")
    except NotRecordedError as exc:
        return f"skipped: {exc}"
    lines = ["/sys/class/nvme\t\n"]
    for path in controllers:
        for leaf in ("model", "serial"):
            text = read_file(system, f"{path}/{leaf}")
            if not isinstance(text, Unavailable):
                lines.append(f"{path}/{leaf}\t{' '.join(text.split())}\n")
    return "".join(lines), None


def _old_record_iommu(system: System) -> tuple[str, None] | str:
    try:
        types = system.glob(IOMMU_GROUP_TYPES)[:IOMMU_GROUPS_READ]
        units = system.glob(IOMMU_UNITS)
    except (NotRecordedError, OSError) as exc:
        return f"skipped: {exc}"
    lines = []
    for path in types:
        text = read_file(system, path)
        if not isinstance(text, Unavailable):
            lines.append(f"{path}\t{text.strip()}\n")
    lines += [f"{path}\t\n" for path in units]
    return "".join(lines), None


# ---------------------------------------------------------------- fake trees


def _hca(files: dict[str, object], device: str, ports: int, net: str) -> None:
    base = f"{IB}/{device}"
    files.update(
        {
            f"{base}/fw_ver": "28.39.1002\n",
            f"{base}/board_id": "MT_0000000838\n",
            f"{base}/node_guid": "b83f:d203:0042:1a2c\n",
            f"{base}/hca_type": "MT4129\n",
            f"{base}/device/net/{net}/ifindex": "5\n",
            f"{base}/ports/lid": "x\n",
        }
    )
    for port in range(1, ports + 1):
        where = f"{base}/ports/{port}"
        files.update(
            {
                f"{where}/state": "4: ACTIVE\n",
                f"{where}/phys_state": "5: LinkUp\n",
                f"{where}/rate": "400 Gb/sec (4X NDR)\n",
                f"{where}/link_layer": "InfiniBand\n",
                f"{where}/pkeys/0": "0xffff\n",
            }
        )
        files.update({f"{where}/counters/{name}": f"{port * 7}\n" for name in IB_ERROR_COUNTERS})
    files[f"{base}/ports/1/counters/{IB_ERROR_COUNTERS[0]}"] = {"error": "permission_denied"}
    files.pop(f"{base}/ports/1/rate")  # a file the kernel does not show


def _tree() -> dict[str, object]:
    files: dict[str, object] = {}
    _hca(files, "mlx5_0", 1, "ibp12s0")
    _hca(files, "mlx5_1", 2, "ibp13s0")
    files.update(
        {
            "/sys/class/nvme/nvme0/model": "SAMSUNG MZ1L21T9HCLS-00A07   \n",
            "/sys/class/nvme/nvme0/serial": "  S6UHNE0T500123\n",
            "/sys/class/nvme/nvme1/model": "Micron_7450\n",
            "/sys/class/nvme/nvme1/firmware_rev": "E2MU200\n",
        }
    )
    files.update({f"/sys/kernel/iommu_groups/{n}/type": "DMA-FQ\n" for n in (0, 1, 12, 100)})
    files["/sys/kernel/iommu_groups/3/type"] = {"error": "permission_denied"}
    files.update({"/sys/class/iommu/dmar0/uevent": "", "/sys/class/iommu/dmar1/uevent": ""})
    return files


PAIRS: tuple[tuple[str, Recorder, Recorder], ...] = (
    ("infiniband", _old_record_infiniband, record_infiniband),
    ("nvme", _old_record_nvme_tree, record_nvme_tree),
    ("iommu", _old_record_iommu, record_iommu),
)


@pytest.mark.parametrize(("family", "old", "new"), PAIRS, ids=[p[0] for p in PAIRS])
@pytest.mark.parametrize("tree", ["full", "empty"])
def test_each_record_is_byte_identical_to_the_old_one(
    family: str, old: Recorder, new: Recorder, tree: str
) -> None:
    system = TreeSystem(_tree() if tree == "full" else {})
    before, after = old(system), new(system)
    assert after == before
    if tree == "full":
        assert isinstance(before, tuple)
        assert before[0].count("\n") >= 2


@pytest.mark.parametrize(("family", "old", "new"), PAIRS, ids=[p[0] for p in PAIRS])
def test_a_tree_the_bundle_lacks_is_left_out_by_both(
    family: str, old: Recorder, new: Recorder
) -> None:
    patterns = (f"{IB}/*", "/sys/class/nvme/nvme*", IOMMU_GROUP_TYPES)
    system = TreeSystem(_tree(), missing=patterns)
    before, after = old(system), new(system)
    assert isinstance(before, str)
    assert before.startswith("skipped: ")
    assert after == before


def _leaves(paths: list[str]) -> Callable[[System], list[tuple[str, bool]]]:
    return lambda system: [(path, True) for path in paths]


def test_the_record_is_bounded_by_count_and_bytes_and_kept_inside_its_root() -> None:
    files: dict[str, object] = {f"/sys/t/{n}": "v" * 100 for n in range(10)}
    system = TreeSystem(files)
    paths = sorted(p for p in files)
    whole = record_tree(system, ("/sys/t",), _leaves(paths))
    assert isinstance(whole, tuple)
    assert whole[0].count("\n") == 10
    counted = record_tree(system, ("/sys/t",), _leaves(paths), max_files=9)
    assert counted == "skipped: /sys/t holds more than 9 files"
    sized = record_tree(system, ("/sys/t",), _leaves(paths), max_bytes=500)
    assert isinstance(sized, str)
    assert "more than 500 bytes" in sized
    for outside in ("/sys/t/../../etc/shadow", "/sys/tt/x", "/etc/shadow", "/sys/t//x"):
        files[outside] = "secret"
        refused = record_tree(system, ("/sys/t",), _leaves([*paths, outside]))
        assert isinstance(refused, str), outside
        assert refused.startswith("skipped:"), outside
        assert "secret" not in refused


def test_a_value_over_a_line_is_left_out_whole_not_cut() -> None:
    system = TreeSystem({"/sys/t/a": "ok\n", "/sys/t/b": "x" * (70 << 10)})
    got = record_tree(system, ("/sys/t",), _leaves(["/sys/t/a", "/sys/t/b"]))
    assert isinstance(got, str)
    assert got.startswith("skipped: '/sys/t/b' holds more than")


def test_a_line_is_measured_in_bytes_as_the_bundle_reader_counts_them() -> None:
    from validator.limits import LINE_BYTES

    # Fewer characters than a line holds, more bytes: three bytes each in UTF-8.
    value = "\u20ac" * (LINE_BYTES // 2)
    system = TreeSystem({"/sys/t/a": "ok\n", "/sys/t/b": value})
    got = record_tree(system, ("/sys/t",), _leaves(["/sys/t/a", "/sys/t/b"]))
    assert isinstance(got, str)
    assert got.startswith("skipped: '/sys/t/b' holds more than")
