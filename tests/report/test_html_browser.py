"""The HTML report in a real browser: headless Chromium renders it, runs its script, shoots it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import struct
import subprocess
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.report.test_report_html import IC_GPUS, PEER_GB_S, ic_sample, interconnect_node
from tests.report.test_report_samples import (
    SCRIPT_DETAIL,
    TIMEOUT_DETAIL,
    XSS_HOST,
    burn_node,
    failing_node,
    healthy_node,
    sample_report,
    scale_report,
    scenario_node,
    unreachable_node,
)
from validator.report import svg
from validator.report.html import render_html
from validator.report.writer import detail_file, result_file, write_detail_pages

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


# ------------------------------------------------------------------ a fleet of 1,000, driven


class _DevTools:
    """Chromium driven over the DevTools protocol on a pipe (fds 3 and 4): no network, no port.

    Messages are JSON, each ended by a NUL byte. Enough of the protocol to load a
    page, run script in it (type into the search box, pick a filter, follow a link)
    and read the result.
    """

    def __init__(self, tmp_path: Path) -> None:
        to_browser, self._to = os.pipe()
        self._from, from_browser = os.pipe()

        def fds() -> None:
            # The browser reads commands on fd 3 and answers on fd 4.
            os.dup2(to_browser, 100)
            os.dup2(from_browser, 101)
            os.dup2(100, 3)
            os.dup2(101, 4)

        self._log = (tmp_path / "chromium.log").open("wb")
        command = [
            _chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}",
            "--remote-debugging-pipe", "about:blank",
        ]  # fmt: skip
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            close_fds=False,
            preexec_fn=fds,  # noqa: PLW1509 - no threads started in the test
        )
        os.close(to_browser)
        os.close(from_browser)
        self._buffer = b""
        self._id = 0
        self._session: str | None = None

    def call(self, method: str, params: dict[str, object] | None = None) -> dict[str, object]:
        self._id += 1
        message: dict[str, object] = {"id": self._id, "method": method, "params": params or {}}
        if self._session is not None:
            message["sessionId"] = self._session
        os.write(self._to, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._id:
                    assert "error" not in reply, reply
                    result: dict[str, object] = reply["result"]
                    return result
            left = deadline - time.monotonic()
            assert left > 0, f"no answer to {method}"
            ready, _, _ = select.select([self._from], [], [], left)
            if ready:
                data = os.read(self._from, 1 << 20)
                assert data, "the browser closed the pipe"
                self._buffer += data

    def open(self, url: str) -> None:
        target = self.call("Target.createTarget", {"url": "about:blank"})
        attached = self.call(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
        )
        self._session = str(attached["sessionId"])
        self.call("Page.navigate", {"url": url})
        self.run(
            "new Promise(done => document.readyState === 'complete' ? done(true)"
            " : addEventListener('load', () => done(true)))"
        )

    def run(self, expression: str) -> object:
        reply = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        assert "exceptionDetails" not in reply, reply
        result = reply["result"]
        assert isinstance(result, dict)
        return result.get("value")

    def close(self) -> None:
        self._session = None
        with contextlib.suppress(AssertionError, OSError):
            self.call("Browser.close")
        try:
            self._process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        os.close(self._to)
        os.close(self._from)
        self._log.close()


@pytest.fixture
def devtools(tmp_path: Path) -> Iterator[_DevTools]:
    _chromium()
    browser = _DevTools(tmp_path)
    try:
        yield browser
    finally:
        browser.close()


def test_a_fleet_of_1000_is_usable_in_the_browser(tmp_path: Path, devtools: _DevTools) -> None:
    node = scenario_node(tmp_path)
    failing = {17: failing_node(), 400: unreachable_node(), 733: failing_node()}
    report = scale_report(node, 1000, failing)
    page = tmp_path / "fleet" / "report.html"
    page.parent.mkdir()
    page.write_text(render_html(report, result_file, detail_file))
    write_detail_pages(report, page.parent)  # the failing nodes' full sections
    started = time.monotonic()
    devtools.open(page.as_uri())
    assert time.monotonic() - started < 30
    count = "document.getElementById('filter-count').textContent"
    # What is drawn, not only what the script marked: a hidden element has no boxes.
    drawn = ".filter(e => e.getClientRects().length > 0)"
    shown = f"Array.from(document.querySelectorAll('#overview tbody tr')){drawn}"
    assert devtools.run(f"[document.getElementById('node-filters')]{drawn}.length") == 1
    assert devtools.run(count) == "1000 of 1000 nodes shown"

    # Filter to the failing nodes: the table and the sections below follow.
    devtools.run(
        "var v = document.getElementById('filter-verdict'); v.value = 'NOT_CERTIFIED';"
        " v.dispatchEvent(new Event('change'))"
    )
    assert devtools.run(count) == "2 of 1000 nodes shown"
    hosts = devtools.run(f"{shown}.map(r => r.getAttribute('data-hostname'))")
    assert hosts == ["gpu00017", "gpu00733"]
    visible = f"Array.from(document.querySelectorAll('section.node')){drawn}.length"
    assert devtools.run(visible) == 2

    # A failing check and a host search narrow it; clearing them brings the healthy back.
    devtools.run(
        "var c = document.getElementById('filter-check'); c.value = 'transport.reach';"
        " c.dispatchEvent(new Event('change'))"
    )
    assert devtools.run(count) == "0 of 1000 nodes shown"
    devtools.run(
        "for (const id of ['filter-verdict', 'filter-check']) {"
        " const e = document.getElementById(id); e.value = '';"
        " e.dispatchEvent(new Event('change')); }"
        " var h = document.getElementById('filter-host'); h.value = 'gpu0099';"
        " h.dispatchEvent(new Event('input'))"
    )
    assert devtools.run(count) == "10 of 1000 nodes shown"

    # Sorting by host, descending, over the filtered table.
    devtools.run("document.querySelector('#overview thead th button.sort').click()")
    devtools.run("document.querySelector('#overview thead th button.sort').click()")
    first = devtools.run(f"{shown}[0].getAttribute('data-hostname')")
    assert first == "gpu00999"

    # Open one healthy node's detail: follow its link from the table.
    anchor = devtools.run(f"{shown}[0].getAttribute('data-anchor')")
    detail = f"document.getElementById('{anchor}-detail')"
    assert devtools.run(f"{detail}.open") is False
    devtools.run(f"{shown}[0].querySelector('td.host a').click()")
    devtools.run("new Promise(done => setTimeout(() => done(true), 100))")
    assert devtools.run(f"{detail}.open") is True
    text = str(devtools.run(f"{detail}.innerText"))
    assert "gpu00999" in text
    assert "TFLOPS" in text
    link = devtools.run(f"{detail}.querySelector('a.result-file').getAttribute('href')")
    assert link == "hosts/gpu00999.json"

    # A failing node's section is brief: its full one is a page of its own, which opens.
    failing = "document.querySelector('section.node[data-hostname=\"gpu00017\"]')"
    assert devtools.run(f"{failing}.querySelector('h3 + div table.gpus')") is None
    href = str(devtools.run(f"{failing}.querySelector('a.detail-file').href"))
    assert href.endswith("/fleet/hosts/gpu00017.html")
    devtools.open(href)
    text = str(devtools.run("document.body.innerText"))
    assert "gpu00017" in text
    assert "Row remap pending" in text
    assert devtools.run("document.querySelectorAll('table.gpus tbody tr').length") == 3
