"""The HTML report in a real browser: headless Chromium renders it, runs its script, shoots it."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from tests.test_report_html import IC_GPUS, PEER_GB_S, ic_sample, interconnect_node
from tests.test_report_samples import (
    SCRIPT_DETAIL,
    TIMEOUT_DETAIL,
    XSS_HOST,
    burn_node,
    failing_node,
    healthy_node,
    sample_report,
)
from validator.report import svg
from validator.report.html import render_html

pytestmark = pytest.mark.browser

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TIMEOUT_S = 90


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("headless Chromium not on PATH (Debian: apt-get install chromium)")


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'profile'}",
        *args,
    ]
    # check=False: the callers assert on returncode so the failure shows stderr.
    return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


@pytest.fixture
def report_file(tmp_path: Path) -> Path:
    path = tmp_path / "report.html"
    path.write_text(render_html(sample_report(healthy_node(), failing_node(XSS_HOST))))
    return path


@pytest.fixture
def burn_file(tmp_path: Path) -> Path:
    path = tmp_path / "burn.html"
    node = burn_node(simulated=True, timeout_detail=TIMEOUT_DETAIL + SCRIPT_DETAIL)
    path.write_text(render_html(sample_report(node)))
    return path


def test_dom_after_rendering(tmp_path: Path, report_file: Path) -> None:
    result = _run(tmp_path, "--dump-dom", report_file.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    assert 'id="verdict-text">NOT CERTIFIED</div>' in dom
    assert 'data-verdict="NOT_CERTIFIED"' in dom
    # The hostile hostname is text, and its script never ran.
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in dom
    assert "<title>GPU acceptance report: NOT CERTIFIED</title>" in dom
    assert "pwned</title>" not in dom
    assert dom.count("<script>") == 1
    # The page's own script did run (the CSP hash matches): it wrapped headers in buttons.
    assert '<th><button type="button" class="sort">Severity</button></th>' in dom
    # What to do comes first for the failing node, and the findings table says it too.
    assert 'id="node-2-todo"' in dom
    assert '<strong class="todo-action">reset the GPU</strong>' in dom
    assert '<th><button type="button" class="sort">What to do</button></th>' in dom


def test_screenshot_is_a_png(tmp_path: Path, report_file: Path) -> None:
    shot = tmp_path / "report.png"
    result = _run(tmp_path, f"--screenshot={shot}", "--window-size=1280,2000", report_file.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    data = shot.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 20_000  # a blank page is a few kB; the report is far more


def test_burn_charts_survive_the_browser(tmp_path: Path, burn_file: Path) -> None:
    result = _run(tmp_path, "--dump-dom", burn_file.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    # The parser kept the inline SVG as SVG: four charts, their bars and lines intact.
    assert dom.count("<svg") == 4
    assert dom.count('<rect class="bar') == 2
    assert dom.count("<polyline") == 5
    assert dom.count("<script>") == 1  # the GPU detail's <script> stayed text
    assert "&lt;script&gt;alert('burn')&lt;/script&gt;" in dom
    assert re.search(r'class="badge simulated"[^>]*>SIMULATED figures<', dom)
    # The sorter ran over the burn table too.
    assert '<button type="button" class="sort">TFLOPS</button>' in dom


def test_burn_screenshot(tmp_path: Path, burn_file: Path) -> None:
    # GPUREADY_SCREENSHOT_DIR keeps the picture for a person to look at.
    keep = os.environ.get("GPUREADY_SCREENSHOT_DIR")
    shot = (Path(keep) if keep else tmp_path) / "burn-report.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    result = _run(tmp_path, f"--screenshot={shot}", "--window-size=1280,2600", burn_file.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    data = shot.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 60_000  # four charts and a table: far more than a blank page


# ------------------------------------------------------------------ interconnect


def _png_pixels(data: bytes) -> set[tuple[int, int, int]]:
    """The distinct RGB colours of an 8-bit RGB/RGBA PNG (Chromium's screenshots)."""
    assert data.startswith(PNG_MAGIC)
    position, idat, header = 8, b"", b""
    while position < len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        kind = data[position + 4 : position + 8]
        body = data[position + 8 : position + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        position += 12 + length
    width, height, depth, color_type = struct.unpack(">IIBB", header[:10])
    assert depth == 8
    assert color_type in (2, 6), color_type
    channels = 3 if color_type == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    previous = bytearray(stride)
    colours: set[tuple[int, int, int]] = set()
    for row in range(height):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                estimate = left + up - corner
                guesses = (abs(estimate - left), abs(estimate - up), abs(estimate - corner))
                best = (left, up, corner)[guesses.index(min(guesses))]
                line[i] = (line[i] + best) & 0xFF
        colours.update((line[i], line[i + 1], line[i + 2]) for i in range(0, stride, channels * 4))
        previous = line
    return colours


def _hex(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


@pytest.fixture
def interconnect_file(tmp_path: Path) -> Path:
    path = tmp_path / "interconnect.html"
    node = interconnect_node(ic_sample(simulated=True, source="simulate"))
    path.write_text(render_html(sample_report(node)))
    return path


def test_heat_map_renders_in_the_browser(tmp_path: Path, interconnect_file: Path) -> None:
    result = _run(tmp_path, "--dump-dom", interconnect_file.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    maps = re.findall(r'<svg class="chart chart-heat".*?</svg>', dom, flags=re.DOTALL)
    assert len(maps) == 2  # unidirectional and bidirectional
    # The parser kept every cell as an SVG rect: n x n, the diagonal blank.
    assert maps[0].count('<rect class="cell') == IC_GPUS * IC_GPUS
    assert maps[0].count('<rect class="cell self"') == IC_GPUS
    assert "<title>GPU 2 -&gt; GPU 5: 276.0 GB/s (bidirectional 270.5)</title>" in maps[0]
    assert len(re.findall(r'<svg class="chart chart-line"', dom)) == 1  # the busbw sweep
    assert dom.count("<script>") == 1
    # The sorter ran over the per-GPU table.
    assert '<button type="button" class="sort">H2D<span class="note">GB/s</span></button>' in dom

    # And it is painted: the screenshot holds the best cells' blue and the slow GPU's red.
    keep = os.environ.get("GPUREADY_SCREENSHOT_DIR")
    shot = (Path(keep) if keep else tmp_path) / "interconnect-report.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    window = "--window-size=1280,3200"
    result = _run(tmp_path, f"--screenshot={shot}", window, interconnect_file.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    colours = _png_pixels(shot.read_bytes())
    for wanted in (svg.heat_color(PEER_GB_S, PEER_GB_S), svg.heat_color(PEER_GB_S / 2, PEER_GB_S)):
        target = _hex(wanted)
        assert any(max(abs(a - b) for a, b in zip(c, target)) <= 3 for c in colours), wanted
