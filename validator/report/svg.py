"""Charts as inline SVG, drawn here rather than in the browser.

The report page must load nothing and needs no script to be read, so the burn-in
charts, the peer-bandwidth heat maps and the all-reduce sweep are plain SVG
elements written into the page (no gradients or patterns: nothing for ``url()``
to reference). Every piece of text goes
through MarkupSafe: a GPU label or unit taken from a device cannot become markup.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from markupsafe import Markup

# Tableau 10: distinct at a glance and readable on white, for up to ten GPUs;
# more GPUs reuse colours in the same order (the legend still names each one).
PALETTE: tuple[str, ...] = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
BAR_COLOR = "#3b6ea8"
LOW_BAR_COLOR = "#b42318"  # a bar below the reference line
INK = "#1f2328"
MUTED = "#59636e"
GRID = "#e3e8ee"
AXIS = "#8c959f"

WIDTH = 640
PLOT_HEIGHT = 220
MARGIN_LEFT = 64
MARGIN_RIGHT = 20
MARGIN_TOP = 40  # room for the chart title
AXIS_BAND = 46  # below the plot: tick labels and the axis label
LEGEND_ROW = 20
# Points kept per line: beyond a few hundred the page grows and nothing more shows.
MAX_POINTS = 400


def color(position: int) -> str:
    """The colour of the ``position``-th series, the same on every chart of a node."""
    return PALETTE[position % len(PALETTE)]


@dataclasses.dataclass(frozen=True)
class Bar:
    """One bar: a label under it and its value, or ``None`` when nothing was measured."""

    label: str
    value: float | None
    tooltip: str = ""


@dataclasses.dataclass(frozen=True)
class Series:
    """One line of a line chart: ``(x, y)`` points in x order, and its colour.

    ``point_labels``, one per point, marks every point with a dot whose tooltip is
    its label: for a short series (an all-reduce sweep) where each point is a figure.
    """

    label: str
    points: tuple[tuple[float, float], ...]
    color: str = PALETTE[0]
    point_labels: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Reference:
    """A horizontal dashed line across a chart, e.g. a limit or a threshold."""

    value: float
    label: str


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values that cover ``low`` to ``high``.

    Steps are 1, 2 or 5 times a power of ten, so labels read as round numbers;
    the first tick is at or below ``low`` and the last at or above ``high``.

    Args:
        low: the smallest value to show.
        high: the largest value to show.
        count: about how many intervals to aim for.

    Returns:
        At least two ascending tick values.
    """
    if not (math.isfinite(low) and math.isfinite(high)):
        return [0.0, 1.0]
    if high < low:
        low, high = high, low
    if high == low:
        # A flat line still needs an axis: open a band around it.
        pad = abs(low) * 0.05 or 1.0
        low, high = low - pad, high + pad
    raw = (high - low) / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    start = math.floor(low / step + 1e-9) * step
    end = math.ceil(high / step - 1e-9) * step
    steps = max(round((end - start) / step), 1)
    return [_tidy(start + i * step) for i in range(steps + 1)]


def _tidy(value: float) -> float:
    """Drop binary noise (0.30000000000000004) from a computed tick."""
    return float(f"{value:.10g}")


def tick_label(value: float, step: float) -> str:
    """A tick value with as many decimals as the step needs (none for whole steps)."""
    if step >= 1 or step <= 0:
        return f"{value:.0f}"
    decimals = min(-math.floor(math.log10(step)), 6)
    return f"{value:.{decimals}f}"


def _num(value: float) -> str:
    """A coordinate: one decimal is finer than a pixel."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


_OPEN, _CLOSE, _SPACE, _EQUALS_QUOTE, _QUOTE = (
    Markup("<"),
    Markup(">"),
    Markup(" "),
    Markup('="'),
    Markup('"'),
)
_SELF_CLOSE, _END_TAG, _NOTHING = Markup("/>"), Markup("</"), Markup("")


def _el(tag: str, attrs: Mapping[str, object], *children: Markup | str) -> Markup:
    """One element; attribute values and text children are escaped.

    One Markup.join (which escapes each part that is not Markup) rather than
    Markup.format, whose Formatter costs several times as much: a node's
    interconnect heat maps are thousands of elements.
    """
    parts: list[Any] = [_OPEN, tag]
    for name, value in attrs.items():
        # Markup.join escapes a str and keeps what has __html__ (Markup.format's rule too).
        text = value if isinstance(value, str) or hasattr(value, "__html__") else str(value)
        parts += (_SPACE, name, _EQUALS_QUOTE, text, _QUOTE)
    if not children:
        parts.append(_SELF_CLOSE)
    else:
        parts += (_CLOSE, *children, _END_TAG, tag, _CLOSE)
    return _NOTHING.join(parts)


@dataclasses.dataclass(frozen=True)
class _Scale:
    """Maps a value range onto a pixel range (which may run backwards, as y does)."""

    low: float
    high: float
    start: float
    end: float

    def __call__(self, value: float) -> float:
        if self.high == self.low:
            return self.start
        return self.start + (value - self.low) / (self.high - self.low) * (self.end - self.start)


def _svg(kind: str, height: float, title: str, *body: Markup) -> Markup:
    return _el(
        "svg",
        {
            "class": f"chart chart-{kind}",
            "viewBox": f"0 0 {WIDTH} {_num(height)}",
            "width": "100%",
            "role": "img",
            "font-family": "system-ui, -apple-system, 'Segoe UI', Roboto, Arial, sans-serif",
            "font-size": "12",
        },
        _el("title", {}, title),
        *body,
    )


def _title(text: str) -> Markup:
    return _el(
        "text",
        {
            "class": "chart-title",
            "x": MARGIN_LEFT,
            "y": 22,
            "font-size": 14,
            "font-weight": 600,
            "fill": INK,
        },
        text,
    )


def _y_axis(scale: _Scale, ticks: Sequence[float], label: str) -> list[Markup]:
    """Grid lines, tick labels and the rotated axis title on the left."""
    step = ticks[1] - ticks[0] if len(ticks) > 1 else 1.0
    right = WIDTH - MARGIN_RIGHT
    parts: list[Markup] = []
    for tick in ticks:
        y = _num(scale(tick))
        parts.append(
            _el(
                "line",
                {"class": "grid", "x1": MARGIN_LEFT, "x2": right, "y1": y, "y2": y, "stroke": GRID},
            )
        )
        parts.append(
            _el(
                "text",
                {
                    "class": "tick",
                    "x": MARGIN_LEFT - 8,
                    "y": y,
                    "dy": "0.32em",
                    "text-anchor": "end",
                    "fill": MUTED,
                },
                tick_label(tick, step),
            )
        )
    middle = _num((scale.start + scale.end) / 2)
    parts.append(
        _el(
            "text",
            {
                "class": "axis-label",
                "transform": f"translate(16 {middle}) rotate(-90)",
                "text-anchor": "middle",
                "fill": MUTED,
            },
            label,
        )
    )
    return parts


def _x_axis_line(bottom: float) -> Markup:
    return _el(
        "line",
        {
            "class": "axis",
            "x1": MARGIN_LEFT,
            "x2": WIDTH - MARGIN_RIGHT,
            "y1": _num(bottom),
            "y2": _num(bottom),
            "stroke": AXIS,
        },
    )


REFERENCE_DASH = "6 4"


def _reference(scale: _Scale, reference: Reference) -> Markup:
    """The dashed line; its words go in the legend, where no data can cover them."""
    y = _num(scale(reference.value))
    return _el(
        "line",
        {
            "class": "reference",
            "x1": MARGIN_LEFT,
            "x2": WIDTH - MARGIN_RIGHT,
            "y1": y,
            "y2": y,
            "stroke": INK,
            "stroke-width": 1.5,
            "stroke-dasharray": REFERENCE_DASH,
        },
        _el("title", {}, reference.label),
    )


def bar_chart(
    bars: Sequence[Bar],
    *,
    title: str,
    y_label: str,
    reference: Reference | None = None,
    value_format: Callable[[float], str] = "{:.1f}".format,
) -> Markup:
    """A vertical bar chart with each bar's value written above it.

    Bars below ``reference`` are drawn in the warning colour. A bar without a
    value leaves its slot empty and reads ``n/a``: a missing figure is never
    drawn as zero.

    Args:
        bars: one per category, left to right.
        title: shown at the top and given to screen readers.
        y_label: the value axis title, with its unit.
        reference: a dashed line to compare the bars with.
        value_format: how the value above a bar is written.

    Returns:
        The ``<svg>`` element.
    """
    top = MARGIN_TOP
    bottom = top + PLOT_HEIGHT
    values = [bar.value for bar in bars if bar.value is not None]
    if reference is not None:
        values.append(reference.value)
    # Bars grow from zero; a little headroom keeps the value labels inside.
    ticks = nice_ticks(0.0, max(values, default=1.0) * 1.08 or 1.0)
    scale = _Scale(ticks[0], ticks[-1], bottom, top)
    parts = [_title(title), *_y_axis(scale, ticks, y_label)]
    # Drawn after the reference line, so their white halo keeps them legible over it.
    labels: list[Markup] = []
    slot = (WIDTH - MARGIN_LEFT - MARGIN_RIGHT) / max(len(bars), 1)
    width = min(slot * 0.6, 72.0)
    for position, bar in enumerate(bars):
        middle = MARGIN_LEFT + slot * (position + 0.5)
        parts.append(
            _el(
                "text",
                {
                    "class": "tick",
                    "x": _num(middle),
                    "y": _num(bottom + 18),
                    "text-anchor": "middle",
                    "fill": MUTED,
                },
                bar.label,
            )
        )
        if bar.value is None:
            labels.append(
                _el(
                    "text",
                    {
                        "class": "bar-value na",
                        "x": _num(middle),
                        "y": _num(bottom - 6),
                        "text-anchor": "middle",
                        "fill": MUTED,
                        "font-style": "italic",
                    },
                    "n/a",
                )
            )
            continue
        low = reference is not None and bar.value < reference.value
        y = scale(max(bar.value, 0.0))
        tooltip = bar.tooltip or f"{bar.label}: {value_format(bar.value)}"
        parts.append(
            _el(
                "rect",
                {
                    "class": "bar low" if low else "bar",
                    "x": _num(middle - width / 2),
                    "y": _num(y),
                    "width": _num(width),
                    "height": _num(bottom - y),
                    "fill": LOW_BAR_COLOR if low else BAR_COLOR,
                    "rx": 2,
                },
                _el("title", {}, tooltip),
            )
        )
        labels.append(
            _el(
                "text",
                {
                    "class": "bar-value",
                    "x": _num(middle),
                    "y": _num(y - 6),
                    "text-anchor": "middle",
                    "fill": INK,
                    "font-weight": 600,
                    "paint-order": "stroke",
                    "stroke": "#fff",
                    "stroke-width": 3,
                },
                value_format(bar.value),
            )
        )
    parts.append(_x_axis_line(bottom))
    keys: list[_Key] = []
    if reference is not None:
        parts.append(_reference(scale, reference))
        keys = [
            _Key(reference.label, INK, shape="dash"),
            _Key("at or above the line", BAR_COLOR, shape="box"),
            _Key("below the line", LOW_BAR_COLOR, shape="box"),
        ]
    parts.extend(labels)
    legend, legend_height = _legend(keys, bottom + AXIS_BAND - 4)
    parts.extend(legend)
    return _svg("bar", bottom + AXIS_BAND - 4 + legend_height, title, *parts)


def thin(
    points: Sequence[tuple[float, float]], limit: int = MAX_POINTS
) -> list[tuple[float, float]]:
    """At most about ``limit`` points, keeping each stretch's lowest and highest.

    A plain stride would hide a short clock dip or power spike, which is exactly
    what a burn-in chart is for; min/max per bucket keeps them.

    Args:
        points: ``(x, y)`` in x order.
        limit: the most points wanted (at least 2).

    Returns:
        The kept points, in x order.
    """
    if len(points) <= limit:
        return list(points)
    size = math.ceil(len(points) / max(limit // 2, 1))
    kept: list[tuple[float, float]] = []
    for start in range(0, len(points), size):
        bucket = points[start : start + size]
        lowest = min(range(len(bucket)), key=lambda i: bucket[i][1])
        highest = max(range(len(bucket)), key=lambda i: bucket[i][1])
        kept.extend(bucket[i] for i in sorted({lowest, highest}))
    return kept


@dataclasses.dataclass(frozen=True)
class _Key:
    """One legend entry: a swatch and its words."""

    label: str
    color: str
    empty: bool = False  # drawn dotted and grey: the series has no data
    shape: str = "line"  # "box" for bars, "dash" for a reference line


# Rough advance of a 12 px sans-serif character, to lay legend entries out.
_CHAR_WIDTH = 6.8


def _legend(keys: Sequence[_Key], top: float) -> tuple[list[Markup], float]:
    """Swatches and names under the plot, wrapping; returns the parts and their height."""
    right = WIDTH - MARGIN_RIGHT
    parts: list[Markup] = []
    x, y = float(MARGIN_LEFT), top
    for key in keys:
        advance = 24 + len(key.label) * _CHAR_WIDTH + 18
        if x > MARGIN_LEFT and x + advance - 18 > right:
            x, y = float(MARGIN_LEFT), y + LEGEND_ROW
        stroke = MUTED if key.empty else key.color
        dash = "2 3" if key.empty else REFERENCE_DASH if key.shape == "dash" else "none"
        if key.shape == "box":
            swatch = _el(
                "rect",
                {
                    "x": _num(x + 3),
                    "y": _num(y - 6),
                    "width": 12,
                    "height": 12,
                    "rx": 2,
                    "fill": stroke,
                },
            )
        else:
            swatch = _el(
                "line",
                {
                    "x1": _num(x),
                    "x2": _num(x + 18),
                    "y1": _num(y),
                    "y2": _num(y),
                    "stroke": stroke,
                    "stroke-width": 2 if key.shape == "dash" else 3,
                    "stroke-dasharray": dash,
                },
            )
        parts.append(
            _el(
                "g",
                {"class": "legend-item empty" if key.empty else "legend-item"},
                swatch,
                _el(
                    "text",
                    {
                        "x": _num(x + 24),
                        "y": _num(y),
                        "dy": "0.32em",
                        "fill": MUTED if key.empty else INK,
                    },
                    key.label,
                ),
            )
        )
        x += advance
    height = (y - top + LEGEND_ROW) if keys else 0.0
    return parts, height


def _x_axis(
    xs: Sequence[float], given: Sequence[tuple[float, str]] | None
) -> tuple[float, float, list[tuple[float, str]]]:
    """The horizontal axis's span and its labelled ticks.

    Round ticks inside the data's span by default; the caller's own ticks (within
    the span) when given. A span of one value is widened so the point has an axis.
    """
    x_low, x_high = min(xs, default=0.0), max(xs, default=1.0)
    if given is not None:
        if x_high <= x_low:
            x_low, x_high = x_low - 1.0, x_high + 1.0
        inside = [(t, label) for t, label in given if x_low - 1e-9 <= t <= x_high + 1e-9]
        return x_low, x_high, inside
    round_ticks = nice_ticks(x_low, x_high, count=6)
    if x_high > x_low:
        # Time runs from the first sample to the last: no empty stretch after the end.
        round_ticks = [t for t in round_ticks if x_low - 1e-9 <= t <= x_high + 1e-9]
    else:
        x_low, x_high = round_ticks[0], round_ticks[-1]
    step = round_ticks[1] - round_ticks[0] if len(round_ticks) > 1 else 1.0
    return x_low, x_high, [(t, tick_label(t, step)) for t in round_ticks]


def _markers(
    points: Sequence[tuple[float, float]], item: Series, x_scale: _Scale, y_scale: _Scale
) -> list[Markup]:
    """A dot on every point of a short series, its label as the tooltip."""
    return [
        _dot(x_scale(x), y_scale(y), 3.5, item.color, _el("title", {}, label))
        for (x, y), label in zip(points, item.point_labels)
    ]


def _dot(x: float, y: float, radius: float, color: str, *children: Markup) -> Markup:
    """A point of a series, drawn where it lies."""
    where = {"class": "point", "cx": _num(x), "cy": _num(y), "r": radius, "fill": color}
    return _el("circle", where, *children)


def power_of_two_ticks(
    low: float, high: float, label: Callable[[int], str], most: int = 8
) -> list[tuple[float, str]]:
    """Ticks at whole powers of two between ``low`` and ``high`` (log2 values).

    Every power when few enough, else every second (fourth, ...), so at most about
    ``most`` labels share the axis; counted down from the largest, which is always
    labelled (a sweep is read at its largest size).

    Args:
        low: log2 of the smallest value shown.
        high: log2 of the largest.
        label: the text for ``2 ** exponent`` (e.g. ``4 GiB``).
        most: about how many ticks at most.

    Returns:
        ``(exponent, label)`` pairs, ascending.
    """
    first, last = math.ceil(low - 1e-9), math.floor(high + 1e-9)
    if last < first:
        return []
    stride = 1
    while (last - first) // stride + 1 > most:
        stride *= 2
    return [(float(e), label(e)) for e in reversed(range(last, first - 1, -stride))]


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    references: Iterable[Reference] = (),
    x_range: tuple[float, float] | None = None,
    x_ticks: Sequence[tuple[float, str]] | None = None,
) -> Markup:
    """A line chart: one polyline per series, a legend naming every series.

    A series without points draws no line and is listed as ``(no data)``.
    The horizontal axis spans the data exactly (widened to ``x_range`` when
    given), with round ticks inside it; the vertical one is rounded outwards.

    Args:
        series: the lines, in legend order.
        title: shown at the top and given to screen readers.
        x_label: the horizontal axis title, with its unit.
        y_label: the vertical axis title, with its unit.
        references: dashed horizontal lines, e.g. the enforced power limit.
        x_range: the least the horizontal axis must show, e.g. the whole run.
        x_ticks: ``(position, label)`` ticks in place of round numbers, for an axis
            the caller has transformed (message sizes on a log2 scale, labelled
            ``1 MiB``); those outside the axis are left out.

    Returns:
        The ``<svg>`` element.
    """
    references = list(references)
    xs = [x for item in series for x, _ in item.points]
    ys = [y for item in series for _, y in item.points] + [ref.value for ref in references]
    top = MARGIN_TOP
    bottom = top + PLOT_HEIGHT
    if x_range is not None:
        xs.extend(x_range)
    x_low, x_high, ticks = _x_axis(xs, x_ticks)
    y_ticks = nice_ticks(min(ys, default=0.0), max(ys, default=1.0))
    x_scale = _Scale(x_low, x_high, MARGIN_LEFT, WIDTH - MARGIN_RIGHT)
    y_scale = _Scale(y_ticks[0], y_ticks[-1], bottom, top)
    parts = [_title(title), *_y_axis(y_scale, y_ticks, y_label)]
    for tick, text in ticks:
        x = _num(x_scale(tick))
        parts.append(
            _el(
                "line",
                {
                    "class": "tick-mark",
                    "x1": x,
                    "x2": x,
                    "y1": _num(bottom),
                    "y2": _num(bottom + 5),
                    "stroke": AXIS,
                },
            )
        )
        parts.append(
            _el(
                "text",
                {
                    "class": "tick",
                    "x": x,
                    "y": _num(bottom + 18),
                    "text-anchor": "middle",
                    "fill": MUTED,
                },
                text,
            )
        )
    parts.append(
        _el(
            "text",
            {
                "class": "axis-label",
                "x": _num((MARGIN_LEFT + WIDTH - MARGIN_RIGHT) / 2),
                "y": _num(bottom + 38),
                "text-anchor": "middle",
                "fill": MUTED,
            },
            x_label,
        )
    )
    for reference in references:
        parts.append(_reference(y_scale, reference))
    for item in series:
        points = thin(item.points)
        if not points:
            continue
        coordinates = " ".join(f"{_num(x_scale(x))},{_num(y_scale(y))}" for x, y in points)
        parts.append(
            _el(
                "polyline",
                {
                    "class": "series",
                    "points": coordinates,
                    "fill": "none",
                    "stroke": item.color,
                    "stroke-width": 2,
                    "stroke-linejoin": "round",
                    "stroke-linecap": "round",
                },
                _el("title", {}, item.label),
            )
        )
        if item.point_labels and len(points) == len(item.point_labels):
            parts.extend(_markers(points, item, x_scale, y_scale))
        elif len(points) == 1:
            # A single point draws no line; mark it so it is not lost.
            only_x, only_y = points[0]
            parts.append(_dot(x_scale(only_x), y_scale(only_y), 3, item.color))
    parts.append(_x_axis_line(bottom))
    keys = [_Key(reference.label, INK, shape="dash") for reference in references]
    keys.extend(
        _Key(
            f"{item.label} (no data)" if not item.points else item.label,
            item.color,
            empty=not item.points,
        )
        for item in series
    )
    legend, legend_height = _legend(keys, bottom + AXIS_BAND + 12)
    parts.extend(legend)
    return _svg("line", bottom + AXIS_BAND + legend_height + 8, title, *parts)


# ------------------------------------------------------------------ heat map

# Diverging red-white-blue (ColorBrewer RdBu ends): the node's best cells read deep
# blue, and a link well below its siblings turns pale and then red, so a slow row and
# column show at a glance; the words in every cell keep it readable without colour.
HEAT_LOW = (178, 24, 43)
HEAT_MIDDLE = (247, 247, 247)
HEAT_HIGH = (33, 102, 172)
# The scale runs from this share of the node's best figure to the best; anything
# lower is as red as it gets. Spread over the whole 0..max range, a link at 85% of
# its siblings (a real failure) would differ from them by a barely visible shade.
HEAT_FLOOR_SHARE = 0.5
MISSING_FILL = "#d0d7de"
SELF_FILL = "#ffffff"
HEAT_LEFT = 100  # room for the row labels and the rotated axis title
HEAT_TOP = 74  # title, column axis title and column labels
HEAT_CELL_MAX = 48.0
HEAT_GRID_MAX = 400.0
HEAT_TEXT_MIN_CELL = 30.0  # below this a cell is too small for its figure
HEAT_LEGEND_STEPS = 10


@dataclasses.dataclass(frozen=True)
class HeatCell:
    """One cell of a heat map: its figure (``None``: none, drawn hatched) and its tooltip."""

    value: float | None
    tooltip: str


def _mix(start: tuple[int, int, int], end: tuple[int, int, int], share: float) -> str:
    red, green, blue = (round(a + (b - a) * share) for a, b in zip(start, end))
    return f"#{red:02x}{green:02x}{blue:02x}"


def heat_color(value: float, top: float) -> str:
    """The fill of a cell worth ``value`` on a map whose best cell is ``top``.

    Args:
        value: the cell's figure.
        top: the largest figure on the map (the scale's end).

    Returns:
        ``#rrggbb``: red at or below HEAT_FLOOR_SHARE of ``top``, white halfway,
        blue at ``top``.
    """
    if top <= 0:
        return _mix(HEAT_LOW, HEAT_LOW, 0.0)
    share = (value / top - HEAT_FLOOR_SHARE) / (1 - HEAT_FLOOR_SHARE)
    share = min(max(share, 0.0), 1.0)
    if share < 0.5:
        return _mix(HEAT_LOW, HEAT_MIDDLE, share * 2)
    return _mix(HEAT_MIDDLE, HEAT_HIGH, (share - 0.5) * 2)


def _ink_on(value: float, top: float) -> str:
    """White words on the deep ends of the scale, dark ones on the pale middle."""
    share = (value / top - HEAT_FLOOR_SHARE) / (1 - HEAT_FLOOR_SHARE) if top > 0 else 0.0
    return "#ffffff" if abs(min(max(share, 0.0), 1.0) - 0.5) > 0.3 else INK


def _hatch(x: float, y: float, size: float) -> Markup:
    """Three diagonal strokes inside a square: "no figure" without a pattern to reference."""
    half = size / 2
    path = (
        f"M{_num(x)},{_num(y + half)} L{_num(x + half)},{_num(y)} "
        f"M{_num(x)},{_num(y + size)} L{_num(x + size)},{_num(y)} "
        f"M{_num(x + half)},{_num(y + size)} L{_num(x + size)},{_num(y + half)}"
    )
    return _el(
        "path",
        {"class": "hatch", "d": path, "stroke": AXIS, "stroke-width": 1, "pointer-events": "none"},
    )


def _heat_labels(
    labels: Sequence[str], cell: float, row_label: str, column_label: str
) -> list[Markup]:
    grid = cell * len(labels)
    parts = [
        _el(
            "text",
            {
                "class": "axis-label",
                "x": _num(HEAT_LEFT + grid / 2),
                "y": 44,
                "text-anchor": "middle",
                "fill": MUTED,
            },
            column_label,
        ),
        _el(
            "text",
            {
                "class": "axis-label",
                "transform": f"translate(16 {_num(HEAT_TOP + grid / 2)}) rotate(-90)",
                "text-anchor": "middle",
                "fill": MUTED,
            },
            row_label,
        ),
    ]
    for position, label in enumerate(labels):
        middle = position * cell + cell / 2
        parts.append(
            _el(
                "text",
                {
                    "class": "tick column",
                    "x": _num(HEAT_LEFT + middle),
                    "y": HEAT_TOP - 8,
                    "text-anchor": "middle",
                    "fill": MUTED,
                },
                label,
            )
        )
        parts.append(
            _el(
                "text",
                {
                    "class": "tick row",
                    "x": HEAT_LEFT - 8,
                    "y": _num(HEAT_TOP + middle),
                    "dy": "0.32em",
                    "text-anchor": "end",
                    "fill": MUTED,
                },
                label,
            )
        )
    return parts


def _heat_cell(
    row: int,
    column: int,
    cell: HeatCell | None,
    *,
    size: float,
    top: float,
    value_format: Callable[[float], str],
) -> list[Markup]:
    """One square: the self cell blank, a figure coloured, a missing figure hatched grey."""
    x, y = HEAT_LEFT + column * size, HEAT_TOP + row * size
    base: dict[str, object] = {
        "data-row": row,
        "data-col": column,
        "x": _num(x),
        "y": _num(y),
        "width": _num(size),
        "height": _num(size),
    }
    if row == column:
        tooltip = cell.tooltip if cell is not None else "the same GPU: no figure"
        attrs = {"class": "cell self", **base, "fill": SELF_FILL, "stroke": GRID}
        return [_el("rect", attrs, _el("title", {}, tooltip))]
    if cell is None or cell.value is None:
        tooltip = cell.tooltip if cell is not None else "not measured"
        attrs = {"class": "cell missing", **base, "fill": MISSING_FILL, "stroke": "#fff"}
        return [_el("rect", attrs, _el("title", {}, tooltip)), _hatch(x, y, size)]
    fill = heat_color(cell.value, top)
    attrs = {"class": "cell", **base, "fill": fill, "stroke": "#fff"}
    parts = [_el("rect", attrs, _el("title", {}, cell.tooltip))]
    if size >= HEAT_TEXT_MIN_CELL:
        parts.append(
            _el(
                "text",
                {
                    "class": "cell-value",
                    "x": _num(x + size / 2),
                    "y": _num(y + size / 2),
                    "dy": "0.32em",
                    "text-anchor": "middle",
                    "font-size": 11,
                    "fill": _ink_on(cell.value, top),
                    "pointer-events": "none",
                },
                value_format(cell.value),
            )
        )
    return parts


def _heat_legend(
    top_value: float, y: float, unit: str, value_format: Callable[[float], str]
) -> list[Markup]:
    """The colour scale as ten steps from the floor share to the best, and the two blanks."""
    step_width = 24.0
    parts: list[Markup] = []
    for step in range(HEAT_LEGEND_STEPS):
        share = HEAT_FLOOR_SHARE + (1 - HEAT_FLOOR_SHARE) * step / (HEAT_LEGEND_STEPS - 1)
        parts.append(
            _el(
                "rect",
                {
                    "class": "legend-step",
                    "x": _num(HEAT_LEFT + step * step_width),
                    "y": _num(y),
                    "width": _num(step_width),
                    "height": 12,
                    "fill": heat_color(share * top_value, top_value),
                },
            )
        )
    end = HEAT_LEFT + HEAT_LEGEND_STEPS * step_width
    low_text = f"\u2264 {value_format(top_value * HEAT_FLOOR_SHARE)}"
    labels = (
        (HEAT_LEFT, "start", low_text),
        (end, "end", f"{value_format(top_value)} {unit}".strip()),
    )
    for x, anchor, text in labels:
        parts.append(
            _el(
                "text",
                {"x": _num(x), "y": _num(y + 28), "text-anchor": anchor, "fill": MUTED},
                text,
            )
        )
    x = end + 24
    parts.append(
        _el(
            "rect",
            {"x": _num(x), "y": _num(y), "width": 12, "height": 12, "fill": MISSING_FILL},
        )
    )
    parts.append(_hatch(x, y, 12))
    parts.append(
        _el("text", {"x": _num(x + 18), "y": _num(y + 6), "dy": "0.32em", "fill": INK}, "no figure")
    )
    return parts


def heat_map(
    labels: Sequence[str],
    cells: Mapping[tuple[int, int], HeatCell],
    *,
    title: str,
    row_label: str,
    column_label: str,
    unit: str,
    value_format: Callable[[float], str] = "{:.1f}".format,
) -> Markup:
    """A square matrix of coloured cells, e.g. the bandwidth between every pair of GPUs.

    Rows and columns follow ``labels``; ``cells`` is keyed by ``(row, column)``
    positions. The diagonal is left blank (a GPU to itself is no pair). A cell
    without a figure is hatched grey and its tooltip says why. The colour scale
    ends at the largest figure on the map, so one slow row or column stands out
    against its siblings whatever the hardware's speed; every cell also carries
    its figure in words (its ``<title>``, and in the cell when there is room).

    Args:
        labels: one per row and column, e.g. ``GPU 0``.
        cells: the off-diagonal cells; an absent one reads ``not measured``.
        title: shown at the top and given to screen readers.
        row_label: the row axis title (e.g. ``from GPU``).
        column_label: the column axis title.
        unit: the figures' unit, for the scale's legend.
        value_format: how a figure is written in its cell and on the legend.

    Returns:
        The ``<svg>`` element.
    """
    count = max(len(labels), 1)
    size = min(HEAT_CELL_MAX, (WIDTH - HEAT_LEFT - MARGIN_RIGHT) / count, HEAT_GRID_MAX / count)
    figures = [cell.value for cell in cells.values() if cell.value is not None]
    top_value = max(figures, default=0.0)
    parts = [_title(title), *_heat_labels(labels, size, row_label, column_label)]
    for row in range(len(labels)):
        for column in range(len(labels)):
            parts.extend(
                _heat_cell(
                    row,
                    column,
                    cells.get((row, column)),
                    size=size,
                    top=top_value,
                    value_format=value_format,
                )
            )
    legend_top = HEAT_TOP + size * len(labels) + 16
    if figures:
        parts.extend(_heat_legend(top_value, legend_top, unit, value_format))
    return _svg("heat", legend_top + 40, title, *parts)
