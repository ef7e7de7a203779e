"""validator.safe_text.visible and one_line: the one escaping of text from a node or a file."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest

from validator.report import shared
from validator.report.environment import get_environment
from validator.safe_text import one_line, visible

# Every character the escaping must show rather than pass on: C0 bar tab and newline,
# DEL, C1, the bidi controls and marks, and the Unicode line/paragraph separators.
OBEYED = [
    *(chr(code) for code in range(0x20) if chr(code) not in "\t\n"),
    "\x7f",
    *(chr(code) for code in range(0x80, 0xA0)),
    "\u061c",
    "\u200e",
    "\u200f",
    "\u2028",
    "\u2029",
    *(chr(code) for code in range(0x202A, 0x202F)),
    *(chr(code) for code in range(0x2066, 0x206A)),
]


@pytest.mark.parametrize("char", OBEYED, ids=[f"U+{ord(c):04X}" for c in OBEYED])
def test_every_obeyed_character_is_shown_as_its_escape(char: str) -> None:
    code = ord(char)
    written = f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    for shown in (visible(f"a{char}b"), visible(f"a{char}b", lines=True), one_line(f"a{char}b")):
        assert shown == f"a{written}b"


def test_no_other_character_is_touched() -> None:
    """Printable text of any script, and spaces, stay as they are (checked over the BMP)."""
    obeyed = set(OBEYED) | {"\n", "\t"}
    kept = "".join(
        chr(code)
        for code in range(0x10000)
        if chr(code) not in obeyed and unicodedata.category(chr(code)) != "Cs"
    )
    assert visible(kept, lines=True) == kept


def test_a_newline_is_kept_only_in_a_block_of_lines() -> None:
    assert visible("one\ntwo", lines=True) == "one\ntwo"
    assert visible("one\ntwo") == "one\\x0atwo"
    assert visible("one\r\ntwo") == "one\\x0d\\x0atwo"


def test_one_line_folds_white_space_and_keeps_a_forged_record_inside_its_line() -> None:
    hostile = "gpu07\x1b]52;c;cm0gLXJm\x07\r\ngpuready: CERTIFIED\u202e\tend"
    line = one_line(hostile)
    assert line == "gpu07\\x1b]52;c;cm0gLXJm\\x07\\x0d gpuready: CERTIFIED\\u202e end"
    assert len(line.splitlines()) == 1


def test_escaping_twice_changes_nothing() -> None:
    hostile = "a\x1b[2J\x9b\u2028\u202eb\nc"
    assert visible(visible(hostile)) == visible(hostile)
    assert one_line(one_line(hostile)) == one_line(hostile)


def test_one_line_still_cuts_and_names_a_bare_exception() -> None:
    assert one_line("x" * 20, limit=10) == "xxxxxxx..."
    assert one_line(ValueError()) == "ValueError"
    assert one_line(ValueError("bad\x1bvalue")) == "bad\\x1bvalue"


def test_the_report_helpers_are_this_escaping() -> None:
    """The renderers' helpers are validator.safe_text's, not copies that could drift apart."""
    assert shared.one_line is one_line
    hostile = "a\x1b\u202e\nb"
    assert shared.clean(hostile) == visible(hostile, lines=True)


@pytest.mark.parametrize("template", ["{{ name }}", "<b>{{ name }}</b>", "{{ name | one_line }}"])
def test_html_templates_print_no_raw_control_character(template: str) -> None:
    """Autoescape leaves ESC and BEL alone: the environment's finalize shows them."""
    rendered = get_environment().from_string(template).render(name="gpu\x1b]8;;x\x07<i>\u202e")
    assert "\x1b" not in rendered
    assert "\x07" not in rendered
    assert "\u202e" not in rendered
    assert "\\x1b]8;;x\\x07&lt;i&gt;\\u202e" in rendered


def test_markup_stays_markup_with_its_controls_shown() -> None:
    from markupsafe import Markup

    rendered = get_environment().from_string("{{ svg }}").render(svg=Markup("<text>a\x1bb</text>"))
    assert rendered == "<text>a\\x1bb</text>"


def test_the_node_agent_error_line_shows_a_hostile_name_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The agent's own error line (seen on the node, or relayed) holds no raw control."""
    from validator.node.agent import run

    code = run(["--simulate", str(tmp_path / "evil\x1b]52;c;cm0=\x07\r\ngpuready: ok\u202e")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("gpuready-agent: error:")
    assert err.count("\n") == 1
    assert "\\x1b]52" in err
    assert not [char for char in err if char in "\x1b\x07\r\u202e"]


def _drawn(renderable: object) -> str:
    """What rich writes for ``renderable`` on a terminal without colours."""
    import io

    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=300, color_system=None, force_terminal=True).print(renderable)
    return out.getvalue()


def test_the_live_fleet_view_shows_a_hostile_host_name_as_text() -> None:
    """Neither its controls nor rich markup in a host's name reach the terminal as such."""
    from validator.cli.progress import FleetProgress
    from validator.model import HostSpec

    name = "gpu[bold]07\x1b]52;c;cm0=\x07\u202e"
    display = FleetProgress()
    display.set_hosts([HostSpec(name=name, address="192.0.2.7")])
    display.phase(name, "collect")
    drawn = _drawn(display._render())
    assert "gpu[bold]07\\x1b]52;c;cm0=\\x07\\u202e" in drawn
    assert not [char for char in drawn if char in "\x1b\x07\u202e"]


def test_the_live_burn_view_shows_a_node_reported_state_as_text(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from validator.cli.burn_display import plain_line, render_burn
    from validator.cli.progress import LiveDisplay
    from validator.node.burnin.burn_progress import BurnProgress, GpuProgress

    gpu = GpuProgress(
        index=0, state="failed\x1b[2J\x9b", tflops=None, power_limit_w=None, sample=None
    )
    progress = BurnProgress(elapsed_s=1.0, duration_s=10.0, gpus=(gpu,))
    drawn = _drawn(render_burn(progress))
    assert "failed\\x1b[2J\\x9b" in drawn
    assert not [char for char in drawn if char in "\x1b\x9b"]
    LiveDisplay().print_line(plain_line(progress))  # off a terminal: written directly
    err = capsys.readouterr().err
    assert "failed\\x1b[2J\\x9b" in err
    assert not [char for char in err if char in "\x1b\x9b"]
