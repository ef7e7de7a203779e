"""The HTML report and the shared Jinja2 environment."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import importlib.resources
import re
from html.parser import HTMLParser
from pathlib import Path

import jinja2
import pytest

from tests.test_report_samples import (
    REACH_MESSAGE,
    SCRIPT_DETAIL,
    TIMEOUT_DETAIL,
    XSS_HOST,
    burn_node,
    failing_node,
    fleet_report,
    healthy_node,
    sample_report,
    unreachable_node,
)
from validator.errors import ReportError
from validator.model import Action, Finding, NodeFacts, NodeResult, Report, Severity, Verdict
from validator.report import environment
from validator.report.environment import (
    autoescapes,
    get_environment,
    render_template,
    templates_dir,
)
from validator.report.html import render_html


class _Collector(HTMLParser):
    """Every start tag with its attributes, in document order, plus script bodies."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self._in_script = False
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"
        if self._in_script:
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script:
            self.scripts[-1] += data
        else:
            self.text.append(data)

    def find(self, tag: str, **attrs: str) -> list[dict[str, str | None]]:
        return [
            a
            for t, a in self.tags
            if t == tag and all(a.get(k.replace("_", "-")) == v for k, v in attrs.items())
        ]


def _parse(html: str) -> _Collector:
    collector = _Collector()
    collector.feed(html)
    collector.close()
    return collector


@pytest.fixture(scope="module")
def page() -> str:
    return render_html(sample_report(healthy_node(), failing_node(XSS_HOST)))


def test_no_external_references(page: str) -> None:
    doc = _parse(page)
    assert "http://" not in page
    assert "https://" not in page
    assert "url(" not in page
    assert "@import" not in page
    for tag, attrs in doc.tags:
        assert tag not in {"link", "img", "iframe", "object", "embed"}, tag
        for name in ("src", "href", "action", "srcset"):
            value = attrs.get(name)
            if value is not None:
                assert value.startswith("#"), f"<{tag} {name}={value!r}> leaves the page"
    assert len(doc.scripts) == 1  # the inline sorter, nothing else


def test_script_is_allowed_by_its_csp_hash_only(page: str) -> None:
    doc = _parse(page)
    csp = doc.find("meta", http_equiv="Content-Security-Policy")
    assert len(csp) == 1
    policy = csp[0]["content"] or ""
    digest = base64.b64encode(hashlib.sha256(doc.scripts[0].encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in policy
    assert "default-src 'none'" in policy
    assert "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]


def test_overall_verdict_banner(page: str) -> None:
    doc = _parse(page)
    banner = doc.find("header", id="verdict")
    assert banner[0]["data-verdict"] == "NOT_CERTIFIED"
    assert "v-NOT_CERTIFIED" in (banner[0]["class"] or "")
    assert re.search(r'id="verdict-text">NOT CERTIFIED<', page)
    assert "1 of 2 nodes certified; not certified: &lt;script&gt;" in page


def test_certified_page_is_green() -> None:
    doc = _parse(render_html(sample_report(healthy_node())))
    assert doc.find("header", id="verdict")[0]["data-verdict"] == "CERTIFIED"
    assert "All 4 checks passed." in "".join(doc.text)


def test_an_unjudged_node_keeps_the_banner_from_certified() -> None:
    dark = NodeResult(
        "dark-01", Verdict.UNKNOWN, NodeFacts("dark-01", "live"), (), summary="Host unreachable."
    )
    page = render_html(sample_report(healthy_node(), dark))
    # a certified node beside one that could not be judged: not certified, by the one rule
    assert _parse(page).find("header", id="verdict")[0]["data-verdict"] == "NOT_CERTIFIED"
    alone = render_html(sample_report(dark))
    assert _parse(alone).find("header", id="verdict")[0]["data-verdict"] == "UNKNOWN"
    assert "No checks were judged for this node." in page
    # Nothing came back from it: one line says so, instead of a grid of n/a and empty tables.
    start = page.index('<section class="node v-UNKNOWN" id="node-2"')
    dark_section = page[start : page.index("</section>", start)]
    assert "No facts were collected from this host." in dark_section
    assert "No GPUs were reported for this node." not in dark_section
    assert '<dl class="facts">' not in dark_section
    assert "Kernel log" not in dark_section


def test_hostile_hostname_is_escaped(page: str) -> None:
    assert XSS_HOST not in page
    assert "&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;" in page
    sections = _parse(page).find("section")
    assert [s["data-hostname"] for s in sections] == ["gpu-node-01", XSS_HOST]


def test_failing_findings_come_before_passing(page: str) -> None:
    doc = _parse(page)
    rows = [a for t, a in doc.tags if t == "tr" and "finding" in (a.get("class") or "").split()]
    assert len(rows) == 10  # 4 for node 1, 6 for node 2
    severities = [a["data-severity"] for a in rows[4:]]
    assert severities == ["FAIL", "FAIL", "UNKNOWN", "WARN", "PASS", "PASS"]
    assert [a["data-check"] for a in rows[4:6]] == ["memory.remap", "gpu.present"]
    assert rows[4]["class"] == "finding sev-FAIL"
    # And in the page text: the first FAIL row precedes every PASS row of node 2.
    node2 = page[page.index('id="node-2"') :]
    assert node2.index('class="finding sev-FAIL"') < node2.index('class="finding sev-PASS"')


def test_node_facts_and_unavailable_values(page: str) -> None:
    node2 = page[page.index('id="node-2"') :]
    assert "<dt>Driver</dt><dd>550.54.15</dd>" in node2
    assert '<dt>cuDNN</dt><dd class="na">n/a (not supported)</dd>' in node2
    assert '<dt>nvcc</dt><dd class="na">n/a (not measured: nvcc not on PATH)</dd>' in node2
    assert '<dt>Kernel</dt><dd class="na">n/a (no permission: uname denied)</dd>' in node2
    assert "<dt>Collected at</dt><dd>2025-03-04T10:11:12Z</dd>" in node2
    assert "<dt>Source</dt><dd>simulate (healthy-h100)</dd>" in node2


def test_gpu_table_rows(page: str) -> None:
    doc = _parse(page)
    rows = [a for t, a in doc.tags if t == "tr" and "gpu" in (a.get("class") or "").split()]
    assert [(r["data-index"], r["class"]) for r in rows] == [
        ("0", "gpu gpu-ok"),
        ("1", "gpu gpu-ok"),
        ("0", "gpu gpu-ok"),
        ("1", "gpu gpu-ok"),
        ("2", "gpu gpu-lost"),
    ]
    assert "GPU-1b2c3d4e-0000-1111-2222-000000000000" in page
    assert "00000000:18:00.0" in page
    assert "81559 MiB" in page
    assert '700 W<span class="note">default 700 W</span>' in page
    assert "Gen4 x16" in page  # GPU 1 of node 2 runs below its Gen5 maximum
    assert "No facts: GPU has fallen off the bus." in page
    assert "n/a (gpu lost: NVML_ERROR_GPU_IS_LOST)" in page


def test_xid_events_listed(page: str) -> None:
    assert "Kernel log (journalctl, last 24 h): 1 Xid event." in page
    assert "Kernel log (dmesg, last 24 h): 0 Xid events." in page
    assert '<td class="mono">0000:1a:00</td>' in page


def test_print_css_present(page: str) -> None:
    assert "@media print" in page
    assert "print-color-adjust: exact" in page


# ------------------------------------------------------------- the environment


def test_environment_is_shared_and_strict() -> None:
    env = get_environment()
    assert env is get_environment()
    assert env.undefined is jinja2.StrictUndefined
    assert env.keep_trailing_newline is True


def test_templates_found_in_source_checkout() -> None:
    assert (templates_dir() / "report.html.j2").is_file()


def test_missing_templates_directory_is_a_report_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environment, "_PROBE", "no-such-template.html.j2")
    with pytest.raises(ReportError, match="report templates not found"):
        templates_dir()


@pytest.mark.parametrize(
    ("name", "escaped"),
    [
        ("report.html.j2", True),
        ("junit.xml.j2", True),
        ("page.html", True),
        ("report.txt.j2", False),
        ("report.md.j2", False),
        ("metrics.prom.j2", False),
        ("report_sort.js.j2", False),
        ("mystery.j2", True),
        (None, True),
    ],
)
def test_autoescape_is_decided_by_output_format(name: str | None, escaped: bool) -> None:
    assert autoescapes(name) is escaped


@pytest.fixture
def scratch(tmp_path: Path) -> jinja2.Environment:
    (tmp_path / "missing.html.j2").write_text("<p>\n{{ present }}\n{{ absent }}</p>\n")
    (tmp_path / "broken.html.j2").write_text("<p>\n{% if x %}\n</p>\n")
    (tmp_path / "escape.html.j2").write_text("{{ value }}")
    (tmp_path / "escape.txt.j2").write_text("{{ value }}")
    (tmp_path / "attr.html.j2").write_text("{{ thing.nope }}")
    return get_environment().overlay(loader=jinja2.FileSystemLoader(str(tmp_path)))


def test_undefined_name_is_report_error_with_line(scratch: jinja2.Environment) -> None:
    with pytest.raises(ReportError, match=r"missing\.html\.j2 line 3: 'absent' is undefined"):
        render_template("missing.html.j2", {"present": 1}, environment=scratch)


def test_undefined_attribute_is_report_error(scratch: jinja2.Environment) -> None:
    with pytest.raises(ReportError, match=r"attr\.html\.j2 line 1: .*nope"):
        render_template("attr.html.j2", {"thing": {}}, environment=scratch)


def test_syntax_error_is_report_error_with_line(scratch: jinja2.Environment) -> None:
    with pytest.raises(ReportError, match=r"broken\.html\.j2 line \d+: .*fix the template"):
        render_template("broken.html.j2", {"x": 1}, environment=scratch)


def test_missing_template_is_report_error(scratch: jinja2.Environment) -> None:
    with pytest.raises(ReportError, match=r"nowhere\.html\.j2 not found"):
        render_template("nowhere.html.j2", {}, environment=scratch)


def test_escaping_follows_the_format(scratch: jinja2.Environment) -> None:
    value = '<b>&"x"'
    html = render_template("escape.html.j2", {"value": value}, environment=scratch)
    text = render_template("escape.txt.j2", {"value": value}, environment=scratch)
    assert html == "&lt;b&gt;&amp;&#34;x&#34;"
    assert text == value


def test_installed_templates_package_is_preferred(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installed = tmp_path / "site-packages" / "validator" / "templates"
    installed.mkdir(parents=True)
    (installed / "report.html.j2").write_text("installed")

    def files(package: str) -> Path:
        assert package == "validator.templates"
        return installed

    monkeypatch.setattr(importlib.resources, "files", files)
    assert templates_dir() == installed


def test_empty_report_renders() -> None:
    page = render_html(Report("2025-03-04T10:15:00Z", "0.1.0", ()))
    assert 'data-verdict="UNKNOWN"' in page
    assert "This report holds no nodes." in page
    assert "No nodes were judged." in page


# ------------------------------------------------------------------ burn-in


def _svgs(html: str) -> list[str]:
    """Each inline <svg>...</svg> element of a page, in order."""
    return re.findall(r"<svg\b.*?</svg>", html, flags=re.DOTALL)


def _chart(html: str, title: str) -> str:
    matches = [chart for chart in _svgs(html) if f"<title>{title}" in chart]
    assert len(matches) == 1, title
    return matches[0]


@pytest.fixture(scope="module")
def burn_page() -> str:
    node = burn_node(timeout_detail=TIMEOUT_DETAIL + SCRIPT_DETAIL)
    return render_html(sample_report(healthy_node(), node))


def test_no_burn_no_burn_section(page: str) -> None:
    assert "<svg" not in page
    assert "Burn-in" not in page


def test_burn_section_has_one_svg_per_chart(burn_page: str) -> None:
    node1 = burn_page[: burn_page.index('id="node-2"')]
    assert "<svg" not in node1  # the healthy node ran no burn
    titles = [re.search(r"<title>([^<]*)</title>", chart).group(1) for chart in _svgs(burn_page)]  # type: ignore[union-attr]
    assert titles == [
        "Matrix-multiply throughput per GPU (bf16)",
        "Power draw",
        "GPU temperature",
        "SM clock",
    ]


def test_tflops_bars_and_reference_line(burn_page: str) -> None:
    chart = _chart(burn_page, "Matrix-multiply throughput")
    # GPU 2 timed out: no bar (never a zero bar), an n/a label instead.
    assert chart.count('<rect class="bar') == 2
    assert chart.count('class="bar low"') == 1  # GPU 1 is below best - 10%
    assert '<text class="bar-value na"' in chart
    assert ">712.4</text>" in chart
    assert ">598.7</text>" in chart
    assert chart.count('class="reference"') == 1
    assert "best \u2212 10%: 641.2" in chart
    labels = re.findall(r'<text class="tick"[^>]*>(GPU \d)</text>', chart)
    assert labels == ["GPU 0", "GPU 1", "GPU 2"]


@pytest.mark.parametrize(
    ("title", "lines", "no_data"),
    [
        ("Power draw", 1, ["GPU 1 (no data)", "GPU 2 (no data)"]),
        ("GPU temperature", 2, ["GPU 2 (no data)"]),
        ("SM clock", 2, ["GPU 2 (no data)"]),
    ],
)
def test_telemetry_charts_draw_a_line_per_sampled_gpu(
    burn_page: str, title: str, lines: int, no_data: list[str]
) -> None:
    chart = _chart(burn_page, title)
    assert chart.count("<polyline") == lines
    polylines = re.findall(r'<polyline[^>]*points="([^"]*)"', chart)
    assert all(len(points.split()) == 12 for points in polylines)
    assert re.findall(r">(GPU \d \(no data\))<", chart) == no_data
    assert "Time since burn start (s)" in chart


def test_power_chart_shows_the_enforced_limit(burn_page: str) -> None:
    chart = _chart(burn_page, "Power draw")
    assert "enforced limit 700 W" in chart
    assert "Power (W)" in chart


def test_burn_table_rows(burn_page: str) -> None:
    doc = _parse(burn_page)
    rows = [a for t, a in doc.tags if t == "tr" and "burn" in (a.get("class") or "").split()]
    assert [(r["data-index"], r["class"]) for r in rows] == [
        ("0", "burn burn-completed"),
        ("1", "burn burn-completed burn-failed"),
        ("2", "burn burn-timeout burn-failed"),
    ]
    assert '688 W<span class="note">98% of 700 W</span>' in burn_page
    assert '<td class="num">82 °C</td>' in burn_page
    assert '<td class="num">1755 MHz</td>' in burn_page
    assert '<td class="num bad">37 / 2</td>' in burn_page
    assert '<td colspan="4" class="na no-telemetry">no telemetry sampled</td>' in burn_page
    assert "not supported: power readings not supported" in burn_page
    assert 'title="9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822c">9f86d081884c\u2026<' in (
        burn_page
    )
    assert "<dt>Matrix size</dt><dd>8192 \u00d7 8192</dd>" in burn_page
    assert "<dt>Elapsed</dt><dd>61.2 s</dd>" in burn_page


def test_burn_detail_is_escaped(burn_page: str) -> None:
    assert "<script>alert" not in burn_page
    assert "&lt;script&gt;alert(&#39;burn&#39;)&lt;/script&gt;" in burn_page
    assert len(_parse(burn_page).scripts) == 1


def test_burn_page_stays_self_contained(burn_page: str) -> None:
    doc = _parse(burn_page)
    assert "http://" not in burn_page
    assert "https://" not in burn_page
    for tag, attrs in doc.tags:
        assert tag not in {"link", "img", "iframe", "object", "embed", "image", "use"}, tag
        assert not [name for name in attrs if name.startswith("on")], (tag, attrs)
        assert "href" not in attrs or (attrs["href"] or "").startswith("#")


def test_simulated_badge_only_when_simulated(burn_page: str) -> None:
    assert "SIMULATED figures" not in burn_page
    simulated = render_html(sample_report(burn_node(simulated=True)))
    assert simulated.count("SIMULATED figures") == 1
    assert 'id="node-1-simulated"' in simulated


def test_burn_that_could_not_start() -> None:
    node = burn_node()
    assert node.facts.burn is not None
    burn = dataclasses.replace(node.facts.burn, gpus=(), error="cuBLAS <init> failed")
    node = dataclasses.replace(node, facts=dataclasses.replace(node.facts, burn=burn))
    page = render_html(sample_report(node))
    assert "The burn-in could not run: cuBLAS &lt;init&gt; failed" in page
    assert "<svg" not in page
    assert 'class="burn sortable"' not in page


def test_burn_without_any_samples_says_so() -> None:
    node = burn_node()
    assert node.facts.burn is not None
    burn = node.facts.burn
    gpus = tuple(dataclasses.replace(gpu, samples=()) for gpu in burn.gpus)
    burn = dataclasses.replace(burn, gpus=gpus, sampler="none")
    page = render_html(
        sample_report(dataclasses.replace(node, facts=dataclasses.replace(node.facts, burn=burn)))
    )
    assert len(_svgs(page)) == 1  # throughput only
    assert page.count("no telemetry sampled (sampler: none).") == 3
    assert page.count('class="na no-telemetry"') == 3


def test_failed_reference_tile_is_marked() -> None:
    node = burn_node()
    assert node.facts.burn is not None
    burn = node.facts.burn
    bad = dataclasses.replace(burn.gpus[0], reference_ok=False, reference_max_error=0.75)
    burn = dataclasses.replace(burn, gpus=(bad, *burn.gpus[1:]))
    page = render_html(
        sample_report(dataclasses.replace(node, facts=dataclasses.replace(node.facts, burn=burn)))
    )
    assert '<td class="nowrap bad">FAILED<span class="note">max error 7.50e-01</span></td>' in page
    row = _parse(page).find("tr", data_index="0", data_status="completed")
    assert row[0]["class"] == "burn burn-completed burn-failed"


# ------------------------------------------------------------------ fleet


def _section(page: str, anchor: str) -> str:
    start = page.index(f'id="{anchor}"')
    return page[start : page.index("</section>", start)]


@pytest.fixture(scope="module")
def fleet_page() -> str:
    return render_html(fleet_report(64, failing=(17, 40), unknown=(5,)))


def test_fleet_header_counts(fleet_page: str) -> None:
    doc = _parse(fleet_page)
    (fleet,) = doc.find("section", id="fleet")
    assert fleet["data-hosts"] == "64"
    header = _section(fleet_page, "fleet")
    assert '<span class="pill">64 hosts</span>' in header
    assert '<span class="pill sev-FAIL">2 not certified</span>' in header
    assert '<span class="pill sev-UNKNOWN">1 unknown</span>' in header
    assert '<span class="pill sev-PASS">61 certified</span>' in header
    assert 'id="interrupted"' not in fleet_page


def test_fleet_interrupted_banner() -> None:
    report = fleet_report(4, failing=(), unknown=())
    assert report.fleet is not None
    report = dataclasses.replace(report, fleet=dataclasses.replace(report.fleet, interrupted=True))
    doc = _parse(render_html(report))
    assert len(doc.find("p", id="interrupted")) == 1


def test_fleet_nodes_table_lists_failing_first(fleet_page: str) -> None:
    doc = _parse(fleet_page)
    rows = [a for t, a in doc.tags if t == "tr" and "node-row" in (a.get("class") or "")]
    assert len(rows) == 64
    assert [r["data-hostname"] for r in rows[:3]] == ["gpu18", "gpu41", "gpu06"]
    verdicts = [r["data-verdict"] for r in rows]
    assert verdicts == ["NOT_CERTIFIED"] * 2 + ["UNKNOWN"] + ["CERTIFIED"] * 61
    # Certified ones keep inventory order.
    assert [r["data-hostname"] for r in rows[3:6]] == ["gpu01", "gpu02", "gpu03"]
    # The sections below follow the table, and every row links to its own node's section.
    sections = doc.find("section")
    hosts = [s["data-hostname"] for s in sections if s.get("data-hostname")]
    assert hosts == [r["data-hostname"] for r in rows]
    links = [a["href"] for t, a in doc.tags if t == "a" and (a.get("href") or "").startswith("#")]
    anchors = {s["id"]: s["data-hostname"] for s in sections if s.get("data-hostname")}
    assert [anchors[link[1:]] for link in links[:3]] == ["gpu18", "gpu41", "gpu06"]


def test_fleet_nodes_table_row_cells(fleet_page: str) -> None:
    table = fleet_page[fleet_page.index('id="overview"') :]
    table = table[: table.index("</table>")]
    assert "<th>Transport</th>" in table
    assert '<th class="num">Elapsed</th>' in table
    row = table[table.index('data-hostname="gpu06"') :]
    row = row[: row.index("</tr>")]
    # Verdict sorts by rank, so the script's ascending sort also puts failing nodes first.
    assert '<td data-sort="1"><span class="badge v-UNKNOWN">UNKNOWN</span></td>' in row
    assert "<td>ssh</td>" in row
    assert '<td class="num" data-sort="41.25">41.2 s</td>' in row
    assert '<a href="#node-3">gpu06</a>' in row
    assert REACH_MESSAGE in row


def test_fleet_sku_stats_table(fleet_page: str) -> None:
    table = fleet_page[fleet_page.index('id="fleet-skus"') :]
    table = table[: table.index("</table>")]
    assert 'data-sku="h100-sxm5-80gb"' in table
    cells = re.findall(r'<td class="num"[^>]*>([^<]*)', table)
    assert cells == ["126", "712.4", "6.1", "662.5"]
    assert "93% of the median" in table


def test_fleet_without_sku_stats_says_why() -> None:
    report = fleet_report(3, failing=(), unknown=())
    assert report.fleet is not None
    report = dataclasses.replace(report, fleet=dataclasses.replace(report.fleet, skus=()))
    page = render_html(report)
    assert 'id="fleet-skus"' not in page
    assert "the fleet comparison was skipped" in page


def test_unreachable_node_renders_cleanly(fleet_page: str) -> None:
    section = _section(fleet_page, "node-3")
    assert 'data-hostname="gpu06"' in section
    assert "No facts were collected from this host." in section
    # One table (its one finding); no facts grid, GPU table, charts or kernel log.
    assert section.count("<table") == 1
    assert 'data-check="transport.reach"' in section
    assert "<svg" not in section
    assert "<figure" not in section
    assert "GPUs</h3>" not in section
    assert "Kernel log" not in section
    assert "via ssh, 41.2 s" in section


def test_agent_stderr_is_collapsed_and_escaped(fleet_page: str) -> None:
    section = _section(fleet_page, "node-3")
    doc = _parse(section)
    (details,) = doc.find("details", id="node-3-stderr")
    assert "open" not in details  # collapsed until asked
    assert "<summary>Agent stderr (2 lines)</summary>" in section
    assert "&lt;b&gt;agent&lt;/b&gt; exited 255\\x1b[31m" in section
    assert "<b>agent</b>" not in fleet_page
    assert "\x1b" not in fleet_page
    # Nodes without stderr have no such block.
    assert fleet_page.count('class="stderr"') == 1


def test_fleet_page_size_is_sane_and_self_contained(fleet_page: str) -> None:
    single = render_html(sample_report(healthy_node()))
    per_node = (len(fleet_page) - len(single)) / 63
    assert len(fleet_page) < 1_000_000
    assert per_node < 8_000, per_node  # linear in hosts: no per-node copy of styles or script
    doc = _parse(fleet_page)
    assert len(doc.scripts) == 1
    assert fleet_page.count("<style>") == 1
    for tag, attrs in doc.tags:
        for name in ("src", "href"):
            value = attrs.get(name)
            assert value is None or value.startswith("#"), (tag, value)


def test_single_node_report_has_no_fleet_parts() -> None:
    page = render_html(sample_report(healthy_node()))
    assert 'id="fleet"' not in page
    assert 'id="overview"' not in page


def test_unreachable_node_without_fleet() -> None:
    page = render_html(sample_report(unreachable_node()))
    assert _parse(page).find("header", id="verdict")[0]["data-verdict"] == "UNKNOWN"
    assert page.count("<table") == 1


# ---------------------------------------------- what to do


def _todo_items(html: str, anchor: str) -> list[str]:
    """The text of each item of a node's "What to do" block, in page order."""
    start = html.index(f'id="{anchor}-todo"')
    block = html[start : html.index("</ol>", start)]
    collector = _parse(block.split(">", 1)[1])
    text = "".join(collector.text)
    return [" ".join(item.split()) for item in text.split("\n") if item.strip()][1:]


def test_what_to_do_groups_failing_gpus_most_serious_first() -> None:
    node = failing_node()
    findings = (
        *node.findings,
        Finding(
            "burn.correctness",
            Severity.FAIL,
            "GPU 0 computed wrong results.",
            gpu_index=0,
            action=Action.DRAIN_RMA,
        ),
        Finding("errors.xid", Severity.FAIL, "Xid 48", gpu_index=0, action=Action.DRAIN_RMA),
        Finding("versions.driver", Severity.FAIL, "old driver", action=Action.FIX_SOFTWARE),
        Finding("thermal.margin", Severity.WARN, "warm", gpu_index=1, action=Action.RERUN),
    )
    html = render_html(sample_report(dataclasses.replace(node, findings=findings)))
    items = _todo_items(html, "node-1")
    serial0 = node.facts.gpus[0].serial
    assert items == [
        f"GPU 0 (serial {serial0}, bus 00000000:18:00.0): drain and RMA \u2014 "
        "burn.correctness, errors.xid",
        "GPU 1 (bus 00000000:19:00.0): reset the GPU \u2014 memory.remap",
        "GPU 2: reboot the node \u2014 gpu.present",
        "the node: fix the software stack \u2014 versions.driver",
        "GPU 1 (bus 00000000:19:00.0): run it again \u2014 power.limit",
    ]
    # A warning is not in the block: it blocks nothing.
    assert "thermal.margin" not in html[html.index('id="node-1-todo"') : html.index("</ol>")]
    doc = _parse(html)
    actions = [a["data-action"] for a in doc.find("li") if "todo" in (a.get("class") or "")]
    assert actions == ["drain_and_rma", "reset_gpu", "reboot", "fix_software_stack", "rerun"]
    hardware = [a for a in doc.find("li") if "hardware" in (a.get("class") or "").split()]
    assert [a["data-gpu"] for a in hardware] == ["0", "1"]


def test_a_certified_node_has_no_what_to_do(page: str) -> None:
    node1 = page[page.index('id="node-1"') : page.index('id="node-2"')]
    assert "What to do" not in node1.replace("<th>What to do</th>", "")
    assert 'id="node-2-todo"' in page


def test_each_finding_shows_its_action_and_source(page: str) -> None:
    node2 = page[page.index('id="node-2"') :]
    assert "<th>What to do</th>" in node2
    assert (
        '<td class="action action-reboot" data-action="reboot" '
        'title="NVIDIA Xid catalog: RESTART_BM">reboot the node'
        '<span class="note">NVIDIA Xid catalog: RESTART_BM</span></td>'
    ) in node2
    # A PASS says nothing there.
    assert '<td class="action" data-action="none"></td>' in node2


def test_a_hostile_serial_in_what_to_do_is_escaped() -> None:
    node = failing_node()
    gpus = (dataclasses.replace(node.facts.gpus[0], serial="<img src=x onerror=alert(1)>"),)
    facts = dataclasses.replace(node.facts, gpus=(*gpus, *node.facts.gpus[1:]))
    finding = Finding(
        "memory.capacity", Severity.FAIL, "small", gpu_index=0, action=Action.DRAIN_RMA
    )
    html = render_html(sample_report(dataclasses.replace(node, facts=facts, findings=(finding,))))
    assert "<img src=x" not in html
    assert "serial &lt;img src=x onerror=alert(1)&gt;" in html
