"""The inline SVG charts: ticks, thinning, escaping, bars and lines."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from validator.report import svg


def _tree(markup: str) -> ET.Element:
    # Our own output: it must also be well-formed XML.
    return ET.fromstring(markup)  # noqa: S314


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (0.0, 712.4, [0.0, 200.0, 400.0, 600.0, 800.0]),
        (1755.0, 1995.0, [1750.0, 1800.0, 1850.0, 1900.0, 1950.0, 2000.0]),
        (0.0, 55.0, [0.0, 20.0, 40.0, 60.0]),
        (0.1, 0.37, [0.1, 0.2, 0.3, 0.4]),
        (700.0, 700.0, [660.0, 680.0, 700.0, 720.0, 740.0]),
        (0.0, 0.0, [-1.0, -0.5, 0.0, 0.5, 1.0]),
    ],
)
def test_nice_ticks(low: float, high: float, expected: list[float]) -> None:
    assert svg.nice_ticks(low, high) == expected


def test_nice_ticks_cover_the_range_with_round_steps() -> None:
    ticks = svg.nice_ticks(37.2, 81.9)
    assert ticks[0] <= 37.2
    assert ticks[-1] >= 81.9
    steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:])}
    assert steps == {10.0}


def test_tick_labels_use_the_decimals_the_step_needs() -> None:
    assert svg.tick_label(1750.0, 50.0) == "1750"
    assert svg.tick_label(0.25, 0.05) == "0.25"
    assert svg.tick_label(0.3, 0.1) == "0.3"


def test_thin_keeps_a_short_dip() -> None:
    points = [(float(t), 1980.0) for t in range(3000)]
    points[1234] = (1234.0, 1200.0)  # one throttled tick
    kept = svg.thin(points, limit=200)
    assert len(kept) <= 200
    assert (1234.0, 1200.0) in kept
    assert kept == sorted(kept)
    short = [(0.0, 1.0), (1.0, 2.0)]
    assert svg.thin(short) == short


def test_bar_chart_escapes_text_and_skips_missing_values() -> None:
    chart = svg.bar_chart(
        [svg.Bar("GPU <0>", 700.0), svg.Bar("GPU 1", None), svg.Bar("GPU 2", 500.0)],
        title="T & <b>",
        y_label="TFLOPS",
        reference=svg.Reference(630.0, "best - 10%"),
    )
    assert "<b>" not in chart
    assert "T &amp; &lt;b&gt;" in chart
    assert "GPU &lt;0&gt;" in chart
    root = _tree(chart)
    rects = [el for el in root.iter("rect") if (el.get("class") or "").startswith("bar")]
    assert [el.get("class") for el in rects] == ["bar", "bar low"]
    heights = [float(el.get("height") or 0) for el in rects]
    assert heights[0] > heights[1] > 0
    values = [
        el.text for el in root.iter("text") if (el.get("class") or "").startswith("bar-value")
    ]
    assert values == ["700.0", "n/a", "500.0"]


def test_bar_heights_are_to_scale() -> None:
    chart = svg.bar_chart([svg.Bar("a", 400.0), svg.Bar("b", 200.0)], title="t", y_label="y")
    rects = [el for el in _tree(chart).iter("rect") if el.get("class") == "bar"]
    high, low = (float(el.get("height") or 0) for el in rects)
    assert high == pytest.approx(2 * low, rel=0.01)


def test_line_chart_draws_a_polyline_per_series_and_a_legend() -> None:
    chart = svg.line_chart(
        [
            svg.Series("GPU 0", ((0.0, 300.0), (5.0, 650.0), (10.0, 690.0)), svg.color(0)),
            svg.Series("GPU 1", (), svg.color(1)),
            svg.Series("GPU 2", ((5.0, 400.0),), svg.color(2)),
        ],
        title="Power draw",
        x_label="Time (s)",
        y_label="Power (W)",
        references=[svg.Reference(700.0, "limit 700 W")],
    )
    root = _tree(chart)
    polylines = list(root.iter("polyline"))
    assert [p.get("stroke") for p in polylines] == [svg.PALETTE[0], svg.PALETTE[2]]
    assert len((polylines[0].get("points") or "").split()) == 3
    assert len(list(root.iter("circle"))) == 1  # the single-point series is marked
    legend = [el.text for el in root.iter("text") if el.text and el.text.startswith("GPU")]
    assert legend == ["GPU 0", "GPU 1 (no data)", "GPU 2"]
    assert "limit 700 W" in chart
    # Higher power is drawn higher up: smaller y.
    ys = [float(pair.split(",")[1]) for pair in (polylines[0].get("points") or "").split()]
    assert ys[0] > ys[1] > ys[2]


def test_line_chart_x_axis_has_ticks_and_label() -> None:
    chart = svg.line_chart(
        [svg.Series("GPU 0", tuple((float(t), 80.0) for t in range(0, 61, 5)))],
        title="GPU temperature",
        x_label="Time since burn start (s)",
        y_label="Temperature (C)",
    )
    ticks = re.findall(r'<text class="tick"[^>]*>([^<]*)</text>', chart)
    assert ticks[-7:] == ["0", "10", "20", "30", "40", "50", "60"]
    # The axis ends at the last sample, not at the next round number.
    long = svg.line_chart(
        [svg.Series("GPU 0", ((0.0, 1.0), (3590.0, 2.0)))],
        title="t",
        x_label="s",
        y_label="y",
        x_range=(0.0, 3601.0),
    )
    x_ticks = re.findall(r'<text class="tick"[^>]*text-anchor="middle"[^>]*>([^<]*)</text>', long)
    assert x_ticks == ["0", "1000", "2000", "3000"]
    assert "Time since burn start (s)" in chart


def test_many_gpus_reuse_the_palette_in_order() -> None:
    assert svg.color(0) == svg.color(len(svg.PALETTE))
    assert len(set(svg.PALETTE)) == len(svg.PALETTE) >= 8
