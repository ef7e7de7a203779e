"""--log-file and --verbose: timestamped lines, a safely opened file; NO_COLOR on a terminal."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from validator.cli.main import main
from validator.cli.options import use_color
from validator.error_tree import ExitCode

HEALTHY = "healthy-8x-h100-sxm"
REPO = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z gpuready\[\d+\] (DEBUG|INFO|ERROR) \S")
# An SGR sequence that sets a colour: foreground, background, bright, 256 or true colour.
COLOUR = re.compile(r"\x1b\[(?:[0-9]*;)*(?:3[0-9]|4[0-9]|9[0-7]|10[0-7])(?:;[0-9]*)*m")


def test_log_file_lines_are_timestamped_and_appended(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log = tmp_path / "gpuready.log"
    for _ in range(2):
        code = main(["--log-file", str(log), "certify", "--simulate", HEALTHY, "--burn", "0"])
        assert code == ExitCode.NOT_CERTIFIED
    capsys.readouterr()
    lines = log.read_text().splitlines()
    assert all(LINE.match(line) for line in lines), lines
    assert sum("started: --log-file" in line for line in lines) == 2
    assert sum(line.endswith("INFO exit 1") for line in lines) == 2
    assert sum(" INFO h100-node-01 NOT_CERTIFIED: " in line for line in lines) == 2
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


def test_verbose_writes_the_lines_on_stderr(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUREADY_PARALLEL", "8")
    code = main(["-v", "certify", "--simulate", HEALTHY, "--burn", "0", "--json"])
    _, err = capsys.readouterr()
    assert code == ExitCode.NOT_CERTIFIED
    lines = err.splitlines()
    assert any(LINE.match(line) and "started: -v certify" in line for line in lines), err
    assert any("DEBUG setting parallel=8 from env var GPUREADY_PARALLEL" in line for line in lines)


def test_an_error_is_logged_escaped(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A name quoted in an error cannot forge a log line or drive a terminal that shows it."""
    log = tmp_path / "gpuready.log"
    evil = "x\x1b]0;owned\x07\nFAKE 2026-01-01T00:00:00.000Z gpuready[1] INFO certified"
    code = main(["--log-file", str(log), "certify", "--simulate", evil, "--burn", "0"])
    capsys.readouterr()
    assert code == ExitCode.BAD_INPUT
    text = log.read_text()
    assert "\x1b" not in text
    assert "\x07" not in text
    errors = [line for line in text.splitlines() if " ERROR " in line]
    assert len(errors) == 1
    assert "\\x1b" in errors[0]
    assert all(LINE.match(line) for line in text.splitlines())


def test_a_link_at_the_log_file_is_never_followed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = tmp_path / "passwd"
    target.write_text("root:x:0:0\n")
    link = tmp_path / "gpuready.log"
    link.symlink_to(target)
    code = main(["--log-file", str(link), "scenarios"])
    _, err = capsys.readouterr()
    assert code == ExitCode.BAD_INPUT
    assert "symbolic link, which is never followed" in err
    assert target.read_text() == "root:x:0:0\n"


def test_a_fifo_log_file_is_refused_without_waiting(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fifo = tmp_path / "gpuready.log"
    os.mkfifo(fifo)
    code = main(["--log-file", str(fifo), "scenarios"])
    _, err = capsys.readouterr()
    assert code == ExitCode.BAD_INPUT
    assert err.startswith(f"gpuready: error: --log-file {fifo}")


def test_use_color(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty:
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_color(None, Tty())
    monkeypatch.setenv("NO_COLOR", "")  # set but empty: no-color.org says it does nothing
    assert use_color(None, Tty())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_color(None, Tty())
    assert use_color(True, Tty())  # --color wins
    assert not use_color(False, Tty())


def on_a_terminal(tmp_path: Path, args: list[str], no_color: str | None) -> str:
    """What gpuready writes to a real terminal (script(1) gives it a pty)."""
    env = {key: value for key, value in os.environ.items() if key != "NO_COLOR"}
    env.update(XDG_STATE_HOME=str(tmp_path / "state"), XDG_CONFIG_HOME=str(tmp_path / "cfg"))
    env.pop("FORCE_COLOR", None)
    if no_color is not None:
        env["NO_COLOR"] = no_color
    command = shlex.join([sys.executable, "-m", "validator.cli.main", *args])
    done = subprocess.run(
        ["script", "-qec", command, "/dev/null"],
        cwd=REPO,
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == ExitCode.NOT_CERTIFIED, done.stdout.decode(errors="replace")
    return done.stdout.decode(errors="replace")


@pytest.mark.skipif(shutil.which("script") is None, reason="script(1) is not installed")
def test_no_color_on_a_real_terminal(tmp_path: Path) -> None:
    args = ["certify", "--simulate", HEALTHY, "--burn", "0"]
    coloured = on_a_terminal(tmp_path, args, None)
    assert COLOUR.search(coloured), "a terminal without NO_COLOR should be coloured"
    plain = on_a_terminal(tmp_path, args, "1")
    assert not COLOUR.search(plain), repr(plain[:400])
    report = plain[plain.index("h100-node-01") :]  # the report itself, after the live line
    assert "\x1b" not in report, repr(report[:400])
    assert "NOT_CERTIFIED" in report
    assert COLOUR.search(on_a_terminal(tmp_path, [*args, "--color"], "1"))  # --color wins
