"""A kernel log is told by its lines' shapes: every real one is, NUL bytes and prose are not."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from validator.node.parsers.kernel_log_shape import log_hosts, not_a_kernel_log

FIXTURES = Path(__file__).parent.parent / "fixtures" / "kernel-log"


def _real_logs(captures_dir: Path) -> list[Path]:
    return sorted((captures_dir / "xid").glob("*.log")) + sorted(FIXTURES.glob("*.log"))


def test_every_real_kernel_log_is_one(captures_dir: Path) -> None:
    logs = _real_logs(captures_dir)
    assert len(logs) >= 10
    for path in logs:
        text = path.read_text(encoding="utf-8")
        assert not_a_kernel_log(text) is None, path.name


def test_each_real_shape_alone_is_a_kernel_log(captures_dir: Path) -> None:
    # One line of each real log, on its own: every stamp shape is known by itself.
    for path in _real_logs(captures_dir):
        first = next(line for line in path.read_text(encoding="utf-8").splitlines() if line)
        assert not_a_kernel_log(first + "\n") is None, path.name


def test_journal_shapes_and_their_host(captures_dir: Path) -> None:
    # The real journal line, then the same line as short-iso, short-precise and kern.log print it.
    journal = (FIXTURES / "gpu-operator1146-rminitadapter-journal.log").read_text(encoding="utf-8")
    line = journal.splitlines()[0]
    message = line.split("kernel: ", 1)[1]
    forms = (
        line,
        f"2024-12-02T11:49:53+0000 worker4 kernel: {message}",
        f"Dec 02 11:49:53.123456 worker4 kernel: {message}",
        f"2024-12-02T11:49:53.123456+00:00 worker4 kernel: {message}",
    )
    for form in forms:
        assert not_a_kernel_log(form + "\n") is None, form
        assert log_hosts(form + "\n") == {"worker4"}
    assert log_hosts(journal) == {"worker4"}
    dmesg = (captures_dir / "xid/gpud-xid79-sxid20034-nvswitch.log").read_text(encoding="utf-8")
    assert log_hosts(dmesg) == set()


def _random_text(size: int) -> str:
    # Hash output: bytes of every value, the same each run.
    blocks = (hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(size // 32))
    return b"".join(blocks).decode("utf-8", errors="replace")


@pytest.mark.parametrize(
    ("label", "text", "said"),
    [
        ("nul", "\x00" * 4096, "NUL bytes"),
        ("random", _random_text(4096), "kernel log lines"),
        (
            "prose",
            "The quick brown fox jumps over the lazy dog.\nNothing to see here.\n"
            "Xid 79 would be bad, but this is a letter.\n",
            "0 of them",
        ),
        ("json", '{"hostname": "node", "xids": []}\n', "0 of them"),
        ("other-journal", "Dec 02 11:49:53 worker4 systemd[1]: Started Session 5.\n" * 3, "0 of"),
    ],
)
def test_what_is_not_a_kernel_log_says_so(label: str, text: str, said: str) -> None:
    why = not_a_kernel_log(text)
    assert why is not None, label
    assert said in why
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", why)


def test_a_mostly_kernel_log_with_a_stray_line_is_one(captures_dir: Path) -> None:
    text = (captures_dir / "xid/gpud-xid79-sxid20034-nvswitch.log").read_text(encoding="utf-8")
    assert not_a_kernel_log("a stray line a tool printed\n" + text) is None
    # Empty and notes-only logs are the caller's (their own finding), not "not a log".
    assert not_a_kernel_log("") is None
    assert not_a_kernel_log("-- No entries --\n") is None


def test_dmesg_facility_and_raw_level_prefixes(captures_dir: Path) -> None:
    # dmesg -x prefixes facility and level, dmesg -r the raw <level>: same lines after them.
    line = (captures_dir / "xid/gpud-xid79-sxid20034-nvswitch.log").read_text().splitlines()[0]
    assert not_a_kernel_log(f"kern  :warn  : {line}\n") is None
    assert not_a_kernel_log(f"<4>{line}\n") is None
