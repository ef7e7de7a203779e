"""The HTML report in a real browser: headless Chromium renders it, runs its script, shoots it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.test_report_samples import (
    SCRIPT_DETAIL,
    TIMEOUT_DETAIL,
    XSS_HOST,
    burn_node,
    failing_node,
    healthy_node,
    sample_report,
)
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
