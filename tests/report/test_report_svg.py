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


# ------------------------------------------------------------------ heat map


def _square(
    count: int, slow: int | None = None, missing: tuple[int, int] | None = None
) -> dict[tuple[int, int], svg.HeatCell]:
    cells = {}
    for row in range(count):
        for column in range(count):
            if row == column:
                continue
            value: float | None = 138.0 if slow in (row, column) else 276.0
            if (row, column) == missing:
                value = None
            cells[(row, column)] = svg.HeatCell(value, f"GPU {row} -> GPU {column}: {value}")
    return cells


def _cells(chart: str) -> list[ET.Element]:
    return [el for el in _tree(chart).iter("rect") if "cell" in (el.get("class") or "").split()]


def test_heat_map_has_every_cell_a_blank_diagonal_and_hatched_gaps() -> None:
    labels = [f"GPU {i}" for i in range(4)]
    chart = svg.heat_map(
        labels,
        _square(4, missing=(1, 2)),
        title="Peer bandwidth",
        row_label="from",
        column_label="to",
        unit="GB/s",
    )
    cells = _cells(chart)
    kinds = [el.get("class") for el in cells]
    assert len(cells) == 16
    assert kinds.count("cell self") == 4
    assert kinds.count("cell missing") == 1
    assert kinds.count("cell") == 4 * 3 - 1
    by_place = {(el.get("data-row"), el.get("data-col")): el for el in cells}
    assert by_place[("1", "2")].get("class") == "cell missing"
    assert by_place[("1", "2")].get("fill") == svg.MISSING_FILL
    assert by_place[("2", "1")].findtext("title") == "GPU 2 -> GPU 1: 276.0"
    assert by_place[("0", "0")].get("fill") == svg.SELF_FILL
    # The gap and the legend's "no figure" swatch are hatched, nothing else.
    assert len([el for el in _tree(chart).iter("path") if el.get("class") == "hatch"]) == 2
    # Row and column labels, in order.
    rows = [el.text for el in _tree(chart).iter("text") if el.get("class") == "tick row"]
    assert rows == labels
    assert "\u2264 138.0" in chart  # the scale starts at half the best
    assert "276.0 GB/s" in chart


def test_a_slow_row_and_column_differ_in_colour() -> None:
    chart = svg.heat_map(
        [f"GPU {i}" for i in range(8)],
        _square(8, slow=6),
        title="t",
        row_label="r",
        column_label="c",
        unit="GB/s",
    )
    fills: dict[bool, set[str]] = {True: set(), False: set()}
    for el in _cells(chart):
        if el.get("class") != "cell":
            continue
        touches_slow = "6" in (el.get("data-row"), el.get("data-col"))
        fills[touches_slow].add(el.get("fill") or "")
    assert fills[True] == {svg.heat_color(138.0, 276.0)}
    assert fills[False] == {svg.heat_color(276.0, 276.0)}
    assert fills[True] != fills[False]


def test_heat_colour_runs_from_red_through_white_to_blue() -> None:
    assert svg.heat_color(276.0, 276.0) == "#2166ac"
    assert svg.heat_color(207.0, 276.0) == "#f7f7f7"  # three quarters of the best
    assert svg.heat_color(138.0, 276.0) == "#b2182b"
    assert svg.heat_color(10.0, 276.0) == "#b2182b"  # below the scale: as red as it gets
    # A link at 85% of its siblings (below interconnect_sibling_min) is plainly lighter.
    light = svg.heat_color(0.85 * 276.0, 276.0)
    assert int(light[1:3], 16) > 0x80


def test_heat_map_escapes_its_words() -> None:
    chart = svg.heat_map(
        ["<b>0</b>", "GPU 1"],
        {
            (0, 1): svg.HeatCell(None, "n/a (error: <script>alert(1)</script>)"),
            (1, 0): svg.HeatCell(5.0, "a & b"),
        },
        title="T <i>",
        row_label="r",
        column_label="c",
        unit="GB/s",
    )
    assert "<script>" not in chart
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in chart
    assert "&lt;b&gt;0&lt;/b&gt;" in chart
    assert "a &amp; b" in chart
    _tree(chart)  # well-formed


def test_heat_map_without_any_figure_has_no_scale() -> None:
    chart = svg.heat_map(
        ["GPU 0", "GPU 1"],
        {(0, 1): svg.HeatCell(None, "x"), (1, 0): svg.HeatCell(None, "y")},
        title="t",
        row_label="r",
        column_label="c",
        unit="GB/s",
    )
    assert [el.get("class") for el in _cells(chart)].count("cell missing") == 2
    assert 'class="legend-step"' not in chart


def test_many_gpus_shrink_the_cells_and_drop_the_words() -> None:
    chart = svg.heat_map(
        [f"GPU {i}" for i in range(16)],
        _square(16),
        title="t",
        row_label="r",
        column_label="c",
        unit="GB/s",
    )
    cells = _cells(chart)
    assert len(cells) == 256
    assert float(cells[0].get("width") or 0) < svg.HEAT_TEXT_MIN_CELL
    assert 'class="cell-value"' not in chart
    small = svg.heat_map(
        ["a", "b"], _square(2), title="t", row_label="r", column_label="c", unit=""
    )
    assert small.count('class="cell-value"') == 2


# ------------------------------------------------------------------ log2 axis


def test_power_of_two_ticks_keep_the_largest_and_thin_out() -> None:
    def label(exponent: int) -> str:
        return f"2^{exponent}"

    assert svg.power_of_two_ticks(20.0, 23.0, label) == [
        (20.0, "2^20"),
        (21.0, "2^21"),
        (22.0, "2^22"),
        (23.0, "2^23"),
    ]
    # 1 MiB .. 4 GiB: 13 powers, every second one, down from the largest.
    ticks = svg.power_of_two_ticks(20.0, 32.0, label)
    assert [t for t, _ in ticks] == [20.0, 22.0, 24.0, 26.0, 28.0, 30.0, 32.0]
    assert [t for t, _ in svg.power_of_two_ticks(2.0, 33.0, label)][-1] == 33.0
    assert len(svg.power_of_two_ticks(2.0, 33.0, label)) <= 8
    assert svg.power_of_two_ticks(20.2, 20.8, label) == []


def test_line_chart_takes_its_x_ticks_and_marks_labelled_points() -> None:
    chart = svg.line_chart(
        [
            svg.Series(
                "busbw",
                ((20.0, 24.5), (21.0, 39.3), (22.0, 65.5)),
                point_labels=("1 MiB: 24.5", "2 MiB: 39.3", "4 MiB: 65.5"),
            )
        ],
        title="All-reduce",
        x_label="Message size",
        y_label="busbw (GB/s)",
        x_ticks=[(19.0, "512 KiB"), (20.0, "1 MiB"), (22.0, "4 MiB"), (23.0, "8 MiB")],
    )
    x_ticks = re.findall(r'<text class="tick"[^>]*text-anchor="middle"[^>]*>([^<]*)</text>', chart)
    assert x_ticks == ["1 MiB", "4 MiB"]  # those outside the data are left out
    circles = list(_tree(chart).iter("circle"))
    assert [c.findtext("title") for c in circles] == ["1 MiB: 24.5", "2 MiB: 39.3", "4 MiB: 65.5"]
    xs = [float(c.get("cx") or 0) for c in circles]
    assert xs[0] == svg.MARGIN_LEFT
    assert xs[-1] == svg.WIDTH - svg.MARGIN_RIGHT
    assert xs[1] == pytest.approx((xs[0] + xs[2]) / 2, abs=0.1)


def test_a_single_point_with_given_ticks_still_has_an_axis() -> None:
    chart = svg.line_chart(
        [svg.Series("busbw", ((33.0, 476.72),), point_labels=("8 GiB: 476.7",))],
        title="t",
        x_label="x",
        y_label="y",
        x_ticks=[(33.0, "8 GiB")],
    )
    circles = list(_tree(chart).iter("circle"))
    assert len(circles) == 1
    middle = (svg.MARGIN_LEFT + svg.WIDTH - svg.MARGIN_RIGHT) / 2
    assert float(circles[0].get("cx") or 0) == pytest.approx(middle, abs=0.1)
    assert ">8 GiB</text>" in chart
