"""Every input is bounded before it is parsed, and an input at its bound stays cheap.

Each run is a child ``python -m validator.cli.main`` under a 1 GiB address-space limit
and a hard timeout, so an unbounded read fails here (MemoryError, killed) rather than
eating the test machine; the child's own peak RSS and CPU time (``wait4``) are held
to the promise: any single input at its limit takes under 10 s and 500 MB. The big
inputs are made here, in tmp: sparse files (a size reported, no bytes written) where
the size is the attack, real captures repeated where the content is.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.hostile.data_files import (
    A10_QUERY,
    T4_XML,
    Workspace,
    bundle,
    corpus,
    xid79_dmesg,
)
from validator import limits

ADDRESS_SPACE = 1 << 30
HARD_TIMEOUT_S = 60.0  # the child is killed here; the promise below is checked apart
PROMISED_S = 10.0
PROMISED_RSS = 500 << 20
HEALTHY = "healthy-8x-h100-sxm"


@dataclass(frozen=True)
class Run:
    """What one child run left."""

    code: int
    out: str
    err: str
    seconds: float  # the child's own CPU time, user and system
    rss: int  # bytes, the child's own peak


def _limit_child() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def run_child(tmp: Path, *args: str) -> Run:
    """``gpuready args`` in a child under the address-space limit, killed at the timeout."""
    env = {**os.environ, "XDG_STATE_HOME": str(tmp / "state")}
    env.pop("GPUREADY_DEBUG", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO_ROOT), env.get("PYTHONPATH"))))
    out_path, err_path = tmp / "child.out", tmp / "child.err"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        child = subprocess.Popen(
            [sys.executable, "-m", "validator.cli.main", *args],
            cwd=tmp,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            preexec_fn=_limit_child,  # noqa: PLW1509 - one setrlimit, no threads in this test
            start_new_session=True,
        )
    timer = threading.Timer(HARD_TIMEOUT_S, os.killpg, (child.pid, signal.SIGKILL))
    timer.start()
    try:
        _, status, usage = os.wait4(child.pid, 0)
    finally:
        timer.cancel()
    child.returncode = os.waitstatus_to_exitcode(status)
    # CPU time, not wall time: CI runs this beside other tests on two cores, and what the
    # input costs is what the child spent (the wall clock is held by HARD_TIMEOUT_S).
    seconds = usage.ru_utime + usage.ru_stime
    return Run(
        code=child.returncode,
        out=out_path.read_text(errors="replace"),
        err=err_path.read_text(errors="replace"),
        seconds=seconds,
        rss=usage.ru_maxrss * 1024,
    )


def cheap(run: Run) -> Run:
    """The run kept the promise: no crash, under 10 s and 500 MB."""
    shown = f"exit {run.code}\n--- stdout:\n{run.out[-2000:]}\n--- stderr:\n{run.err[-2000:]}"
    assert run.code >= 0, f"killed by signal {-run.code}\n{shown}"
    assert run.code != 70, shown
    assert "Traceback" not in run.err, shown
    assert run.seconds < PROMISED_S, f"took {run.seconds:.1f} s of CPU\n{shown}"
    assert run.rss < PROMISED_RSS, f"peak RSS {run.rss >> 20} MB\n{shown}"
    return run


def refused(run: Run, *needles: str) -> str:
    """Exit 2 with one error line holding every needle; that line."""
    cheap(run)
    lines = [line for line in run.err.splitlines() if line.strip()]
    assert run.code == 2, (run.code, run.err[-2000:])
    assert len(lines) == 1, run.err[-2000:]
    assert lines[0].startswith("gpuready: error: "), run.err[-2000:]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert run.out == ""
    return lines[0]


def make_bundle(tmp: Path, changes: dict[str, object] | None = None) -> list[str]:
    """The healthy A10 bundle of the hostile suite, changed; certify's argv for it."""
    bundle(changes)(Workspace(tmp, lambda: tmp))  # type: ignore[arg-type]
    return [
        "certify",
        "--capture",
        str(tmp / "bundle"),
        "--policy",
        str(tmp / "policy.yml"),
        "--db",
        str(tmp / "history.db"),
        "--report-dir",
        str(tmp / "out"),
    ]


def sparse(path: Path, size: int, tail: bytes = b"") -> None:
    """A file reporting ``size`` bytes, all holes but its last ``len(tail)``."""
    with path.open("wb") as handle:
        handle.truncate(size - len(tail))
        handle.seek(size - len(tail))
        handle.write(tail)


def gpu_sections(count: int) -> str:
    """The A10's ``-q`` with its one GPU section repeated ``count`` times, each its own bus."""
    text = corpus(A10_QUERY)
    start = re.search(r"^GPU [0-9A-Fa-f]{8}:", text, flags=re.M)
    assert start is not None
    head, section = text[: start.start()], text[start.start() :]
    head = re.sub(r"(Attached GPUs\s+): \d+", rf"\1: {count}", head)
    bus = re.search(r"^GPU ([0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}):", section, flags=re.M)
    assert bus is not None
    return head + "".join(
        section.replace(bus.group(1), f"00000000:{i % 256:02X}", 1).replace(
            bus.group(1).lower(), f"00000000:{i % 256:02x}"
        )
        for i in range(count)
    )


# ------------------------------------------------------------ the kernel log


def test_a_two_gib_kernel_log_is_read_from_its_tail_and_the_report_says_so(
    tmp_path: Path,
) -> None:
    argv = make_bundle(tmp_path)
    tail = xid79_dmesg(89_990.0).encode()  # an Xid 79 ten seconds before the capture
    sparse(tmp_path / "bundle" / "dmesg.txt", 2 << 30, tail)
    run = cheap(run_child(tmp_path, *argv))
    assert run.code == 1, run.out  # the Xid at the very end was read
    assert "errors.xid" in run.out
    report = (tmp_path / "out" / "report.json").read_text()
    assert "only its last 64 MiB were read" in report
    assert "2.0 GiB" in report


def test_a_kernel_log_of_one_endless_line_is_no_log(tmp_path: Path) -> None:
    argv = make_bundle(tmp_path, {"dmesg.txt": "x" * (100 << 20)})  # 100 MB, no newline
    run = cheap(run_child(tmp_path, *argv))
    assert run.code == 1  # the kernel log is unknown, which never certifies
    assert "only its last 64 MiB were read" in (tmp_path / "out" / "report.json").read_text()


# ------------------------------------------------------------ GPU sections


def test_a_query_of_a_hundred_thousand_gpu_sections_is_refused_by_size(tmp_path: Path) -> None:
    argv = make_bundle(tmp_path, {"nvidia-smi.txt": None})
    query = tmp_path / "bundle" / "nvidia-smi-q.txt"
    text = gpu_sections(1)
    section = text[text.index("\nGPU ") :]
    with query.open("w") as handle:
        handle.write(text)
        for _ in range((32 << 20) // len(section)):
            handle.write(section)
    line = refused(run_child(tmp_path, *argv), "nvidia-smi-q.txt", "larger than the 16 MiB")
    assert "MiB" in line


def test_a_query_of_65_gpu_sections_is_refused(tmp_path: Path) -> None:
    argv = make_bundle(tmp_path, {"nvidia-smi-q.txt": gpu_sections(65), "nvidia-smi.txt": None})
    refused(run_child(tmp_path, *argv), "nvidia-smi-q.txt", "65 GPU sections", "at most 64")


def test_a_query_of_64_gpu_sections_is_judged(tmp_path: Path) -> None:
    argv = make_bundle(tmp_path, {"nvidia-smi-q.txt": gpu_sections(64), "nvidia-smi.txt": None})
    run = cheap(run_child(tmp_path, *argv))
    assert run.code in (0, 1), run.err
    assert "64x" in run.out


def test_an_xml_query_of_65_gpus_is_refused(tmp_path: Path) -> None:
    text = corpus(T4_XML)
    gpu = re.search(r"<gpu id=.*?</gpu>\n?", text, flags=re.S)
    assert gpu is not None
    many = text[: gpu.start()] + gpu.group(0) * 65 + text[gpu.end() :]
    argv = make_bundle(
        tmp_path, {"nvidia-smi-q.xml": many, "nvidia-smi-q.txt": None, "nvidia-smi.txt": None}
    )
    refused(run_child(tmp_path, *argv), "nvidia-smi-q.xml", "65 GPU sections", "at most 64")


# ------------------------------------------------------------ bundle files


@pytest.mark.parametrize(
    "name", ["nvidia-smi-q.txt", "dmesg.txt", "nvbandwidth.txt", "meta.json", "hostname.txt"]
)
def test_a_fifo_as_a_bundle_file_is_refused_without_waiting(tmp_path: Path, name: str) -> None:
    argv = make_bundle(tmp_path, {name: None})
    os.mkfifo(tmp_path / "bundle" / name)
    refused(run_child(tmp_path, *argv), name, "is a FIFO, not a regular file")


@pytest.mark.parametrize("name", ["nvidia-smi-q.txt", "dmesg.txt", "dcgmi-diag.json"])
def test_a_link_to_dev_zero_as_a_bundle_file_is_refused_unfollowed(
    tmp_path: Path, name: str
) -> None:
    argv = make_bundle(tmp_path, {name: None})
    (tmp_path / "bundle" / name).symlink_to("/dev/zero")
    refused(run_child(tmp_path, *argv), name, "is a symbolic link")


def test_dev_zero_as_a_policy_is_refused() -> None:
    # an operator-named path is followed, but a device is still no file to parse
    with pytest.raises(limits.OverLimitError, match="is a character device, not a regular file"):
        limits.read_bounded("/dev/zero", limits.DOCUMENT_BYTES)


@pytest.mark.parametrize(
    ("name", "limit"),
    [
        ("nvbandwidth.txt", limits.TOOL_OUTPUT_BYTES),
        ("all_reduce_perf.txt", limits.TOOL_OUTPUT_BYTES),
        ("nvidia-smi-nvlink-e.txt", limits.TOOL_OUTPUT_BYTES),
        ("rpm-qa.txt", limits.TOOL_OUTPUT_BYTES),
        ("nvidia-smi-q.xml", limits.SMI_QUERY_BYTES),
        ("meta.json", limits.SMALL_FILE_BYTES),
        ("cudnn_version.h", limits.SMALL_FILE_BYTES),
    ],
)
def test_a_bundle_file_one_byte_over_its_bound_is_refused(
    tmp_path: Path, name: str, limit: int
) -> None:
    argv = make_bundle(tmp_path, {name: None})
    (tmp_path / "bundle" / name).write_bytes(b"7" * (limit + 1))
    refused(run_child(tmp_path, *argv), name, f"larger than the {limits.size_text(limit)}")


def test_a_bundle_file_of_one_100_mb_line_is_refused(tmp_path: Path) -> None:
    argv = make_bundle(tmp_path)
    (tmp_path / "bundle" / "nvbandwidth.txt").write_bytes(b"7" * (100 << 20))
    refused(run_child(tmp_path, *argv), "nvbandwidth.txt", "is 100 MiB, larger than the 4 MiB")


def test_a_sparse_bundle_file_reporting_a_terabyte_is_refused_unread(tmp_path: Path) -> None:
    argv = make_bundle(tmp_path, {"nvidia-smi-q.txt": None})
    sparse(tmp_path / "bundle" / "nvidia-smi-q.txt", 1 << 40)
    refused(run_child(tmp_path, *argv), "nvidia-smi-q.txt", "is 1024.0 GiB")


@pytest.mark.parametrize("name", ["nvbandwidth.json", "dcgmi-diag.json", "meta.json"])
def test_deeply_nested_json_in_a_bundle_is_one_line(tmp_path: Path, name: str) -> None:
    depth = 500_000  # 1 MB: under every bound, far past any parser's recursion
    argv = make_bundle(tmp_path, {name: "[" * depth + "]" * depth})
    refused(run_child(tmp_path, *argv), name)


# ------------------------------------------------------------ the telemetry CSV


def telemetry_scenario(tmp: Path, rows: int) -> list[str]:
    """A scenario whose burn replays a CSV of ``rows`` rows made from a real log's first poll."""
    real = REPO_ROOT / "tests/fixtures/telemetry/a100-80gb-8x-gpt-training-healthy.csv"
    lines = real.read_text().splitlines()
    header, poll = lines[0], lines[1:9]
    with (tmp / "t.csv").open("w") as out:
        out.write(header + "\n")
        for i in range(rows):
            cells = poll[i % 8].split(",", 1)
            minutes, second = divmod(i // 8, 60)
            stamp = f"2023/05/26 {minutes // 60:02d}:{minutes % 60:02d}:{second:02d}"
            out.write(f"{stamp}.000,{cells[1]}\n")
    return write_scenario(tmp, {"burn": {"telemetry_csv": "t.csv"}})


def write_scenario(tmp: Path, extra: dict[str, object]) -> list[str]:
    (tmp / "policy.yml").write_text("require_burn: false\n")
    (tmp / "s.json").write_text(json.dumps({"name": "t", "extends": HEALTHY, **extra}))
    return [
        "certify",
        "--simulate",
        str(tmp / "s.json"),
        "--burn",
        "0",
        "--policy",
        str(tmp / "policy.yml"),
        "--db",
        str(tmp / "h.db"),
        "--report-dir",
        str(tmp / "out"),
    ]


def test_a_telemetry_csv_at_its_row_bound_is_read(tmp_path: Path) -> None:
    argv = telemetry_scenario(tmp_path, limits.TELEMETRY_CSV_ROWS - 1)  # and its header
    run = cheap(run_child(tmp_path, *argv))
    assert run.code == 0, run.err


def test_a_telemetry_csv_over_its_row_bound_is_refused(tmp_path: Path) -> None:
    argv = telemetry_scenario(tmp_path, limits.TELEMETRY_CSV_ROWS)
    refused(run_child(tmp_path, *argv), "t.csv", f"more than {limits.TELEMETRY_CSV_ROWS} lines")


def test_a_sparse_telemetry_csv_of_a_gib_is_refused_at_its_first_line(tmp_path: Path) -> None:
    argv = write_scenario(tmp_path, {"burn": {"telemetry_csv": "t.csv"}})
    sparse(tmp_path / "t.csv", 1 << 30)
    refused(run_child(tmp_path, *argv), "t.csv", "line 1 is longer than")


def test_a_fifo_as_the_telemetry_csv_is_refused(tmp_path: Path) -> None:
    argv = write_scenario(tmp_path, {"burn": {"telemetry_csv": "t.csv"}})
    os.mkfifo(tmp_path / "t.csv")
    refused(run_child(tmp_path, *argv), "t.csv", "is a FIFO")


def test_a_fifo_as_the_scenario_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "s.json")
    refused(run_child(tmp_path, "certify", "--simulate", str(tmp_path / "s.json")), "is a FIFO")


# ------------------------------------------------------------ documents


def _certify_with_policy(tmp: Path, policy: str) -> list[str]:
    return [
        "certify",
        "--simulate",
        HEALTHY,
        "--burn",
        "0",
        "--policy",
        policy,
        "--db",
        str(tmp / "h.db"),
        "--report-dir",
        str(tmp / "out"),
    ]


def test_dev_zero_as_the_policy_is_refused(tmp_path: Path) -> None:
    refused(run_child(tmp_path, *_certify_with_policy(tmp_path, "/dev/zero")), "character device")


def test_a_fifo_as_the_policy_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "p.yml")
    refused(run_child(tmp_path, *_certify_with_policy(tmp_path, str(tmp_path / "p.yml"))), "FIFO")


def test_a_policy_over_its_size_is_refused(tmp_path: Path) -> None:
    (tmp_path / "p.yml").write_text("require_burn: false\n" + "#" * (5 << 20) + "\n")
    line = refused(run_child(tmp_path, *_certify_with_policy(tmp_path, str(tmp_path / "p.yml"))))
    assert "larger than the 4 MiB" in line


def test_a_certificate_that_is_dev_zero_is_refused(tmp_path: Path) -> None:
    refused(run_child(tmp_path, "verify-cert", "/dev/zero"), "character device")
    refused(
        run_child(
            tmp_path,
            "drift",
            "--simulate",
            HEALTHY,
            "--certificate",
            "/dev/zero",
            "--db",
            str(tmp_path / "h.db"),
        ),
        "character device",
    )


def test_a_certificate_over_its_size_is_refused(tmp_path: Path) -> None:
    sparse(tmp_path / "c.json", 1 << 32)
    refused(run_child(tmp_path, "verify-cert", str(tmp_path / "c.json")), "larger than the 16 MiB")


def test_an_inventory_alias_bomb_is_refused_quickly(tmp_path: Path) -> None:
    lines = ["a0: &a0 {x: 1}"]
    for level in range(1, 12):
        lines.append(f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 10)}]")
    text = "all:\n  hosts:\n    node-a:\n      bomb: *a11\n"
    (tmp_path / "inv.yml").write_text("\n".join(lines) + "\n" + text)
    run = cheap(
        run_child(
            tmp_path,
            "certify",
            "-i",
            str(tmp_path / "inv.yml"),
            "--burn",
            "0",
            "--db",
            str(tmp_path / "h.db"),
        )
    )
    assert run.code == 2, run.err


def test_dev_zero_as_the_inventory_is_refused(tmp_path: Path) -> None:
    run = run_child(tmp_path, "certify", "-i", "/dev/zero", "--db", str(tmp_path / "h.db"))
    refused(run, "character device")


# ------------------------------------------------------------ the readers


def test_read_tail_keeps_whole_lines_and_says_the_size(tmp_path: Path) -> None:
    path = tmp_path / "log"
    path.write_bytes(b"first line\nsecond\nthird\n")
    assert limits.read_tail(path, 100) == (b"first line\nsecond\nthird\n", 0)
    assert limits.read_tail(path, 12) == (b"third\n", 24)


def test_read_bounded_takes_a_file_at_its_bound(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert limits.read_bounded(path, 100) == b"x" * 100
    with pytest.raises(limits.OverLimitError, match="is 100 bytes, larger than the 99 bytes"):
        limits.read_bounded(path, 99)


def test_read_lines_streams_under_its_bounds(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_text("a\r\nbb\n\nccc")
    assert limits.read_lines(path, 4, max_line=3) == ["a", "bb", "", "ccc"]
    with pytest.raises(limits.OverLimitError, match="holds more than 3 lines"):
        limits.read_lines(path, 3)
    with pytest.raises(limits.OverLimitError, match="line 4 is longer than 2 characters"):
        limits.read_lines(path, 4, max_line=2)


def test_read_bounded_stops_a_file_that_lies_about_its_size() -> None:
    # /proc files report size 0 and may hold anything: the read still stops at the bound.
    with pytest.raises(limits.OverLimitError, match="larger than the 10 bytes"):
        limits.read_bounded("/proc/self/maps", 10)


# ------------------------------------------------------------ a flood of Xids


def test_a_flood_of_xids_keeps_the_latest_and_says_how_many_were_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from validator.node import system_facts
    from validator.node.capture.capture_replay import CaptureSystem
    from validator.node.parsers import kernel_log

    monkeypatch.setattr(kernel_log, "KERNEL_LOG_EVENTS", 10)
    monkeypatch.setattr(system_facts, "KERNEL_LOG_EVENTS", 10)
    make_bundle(tmp_path)
    xid = xid79_dmesg(1.0).splitlines()[-1]
    lines = [xid.replace("[      1.000000]", f"[{1000.0 + i:14.6f}]") for i in range(45)]
    assert lines[0] != lines[1]
    (tmp_path / "bundle" / "dmesg.txt").write_text("\n".join(lines) + "\n")
    facts = system_facts.kernel_log_facts(CaptureSystem(tmp_path / "bundle"), None)
    assert isinstance(facts.events, tuple)
    assert [event.uptime_s for event in facts.events] == [1035.0 + i for i in range(10)]
    assert "35 older Xid or fault lines were not kept (the latest 10 of each were)" in (
        facts.source
    )


# ------------------------------------------------------------ YAML aliases


def test_yaml_aliases_are_bounded_by_what_they_expand_to() -> None:
    from validator.fields import LoadError
    from validator.judge import yamlfile

    assert yamlfile.load("a: &x [1, 2]\nb: *x\nc: [*x, *x]\n") == {
        "a": [1, 2],
        "b": [1, 2],
        "c": [[1, 2], [1, 2]],
    }
    levels = ["l0: &l0 [x]"] + [
        f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 10)}]" for n in range(1, 8)
    ]  # 10^7 values in 8 short lines
    with pytest.raises(LoadError, match=r"'l6' expands through its aliases .* past 1,000,000"):
        yamlfile.load("\n".join(levels))
    with pytest.raises(LoadError, match=r"'a' expands through its aliases .* into itself"):
        yamlfile.load("a: &x [1, *x]\n")


def test_a_live_kernel_log_past_the_bound_is_judged_from_its_tail(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import datetime

    from validator.node import system_facts
    from validator.node.system import CommandResult

    monkeypatch.setattr(system_facts, "KERNEL_LOG_TAIL_BYTES", 200)
    xid = xid79_dmesg(95.0).splitlines()[-1]
    printed = "[   1.000000] early line that is dropped\n" * 20 + xid + "\n"

    class Host:
        def run(self, argv: object, timeout_s: float = 30.0) -> CommandResult:
            return CommandResult(0, printed)

        def now(self) -> datetime.datetime:
            return datetime.datetime(2024, 6, 25, tzinfo=datetime.timezone.utc)

        def read_text(self, path: str) -> str:
            return "100.0 100.0\n"

    facts = system_facts.kernel_log_facts(Host(), 24.0)  # type: ignore[arg-type]
    assert isinstance(facts.events, tuple)
    assert [event.xid for event in facts.events] == [79]
    assert "only its last 200 bytes were read: it printed" in facts.source
