"""The chain timeline picture: attempts over the step axis, checkpoint/export marks, coverage gaps in red,
and the selection metric with its window shaded and the selected step marked.

matplotlib is imported inside `render_timeline` (it costs ~0.5 s) and drawn on an Agg canvas without pyplot,
so nothing global (backend, current figure) is touched and renders are safe in a server thread. Outputs are
deterministic (no dates, fixed SVG id salt): a re-render of the same record writes identical bytes, so a picture
whose inputs (`_drawn_from`) did not change is given back as drawn before instead of drawn again.
"""

from __future__ import annotations

import io
import json
import math
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

from rlcleanup.models.record import CompletionRecord
from rlcleanup.report.candidates import marked_step
from rlcleanup.report.inputs import ReportInputs

GAP_RED = "#d00000"
STATE_COLOURS = {"succeeded": "#2e7d32", "completed": "#2e7d32", "failed": "#ef6c00"}
OTHER_STATE = "#607d8b"
CHECKPOINT_BLUE = "#1565c0"
EXPORT_PURPLE = "#6a1b9a"
WINDOW_YELLOW = "#ffe082"
SELECTED_GOLD = "#b8860b"
CURVE_BLUE = "#1f77b4"
DPI = 100
WIDTH_IN = 10.0


@dataclass
class TimelineImage:
    png: bytes
    svg: str  # an inline-able <svg> element (no XML prolog, no metadata)
    metric: str
    # Named pixel positions in the PNG (x right, y down), for tests and for anyone annotating the picture.
    probes: dict[str, tuple[int, int]] = field(default_factory=dict)


def attempt_colour(state: str | None) -> str:
    return STATE_COLOURS.get((state or "").lower(), OTHER_STATE)


def _segments(first: int, last: int, gaps: list[tuple[int, int]]) -> list[tuple[float, float, bool]]:
    """Split [first, last] into (start, end, is_gap) pieces in step units, each step a unit-wide cell."""
    out: list[tuple[float, float, bool]] = []
    cursor = first - 0.5
    for a, b in sorted(gaps):
        lo, hi = max(a, first), min(b, last)
        if lo > hi:
            continue
        if lo - 0.5 > cursor:
            out.append((cursor, lo - 0.5, False))
        out.append((lo - 0.5, hi + 0.5, True))
        cursor = hi + 0.5
    if cursor < last + 0.5:
        out.append((cursor, last + 0.5, False))
    return out


def _metric_points(inputs: ReportInputs) -> tuple[list[float], list[float]]:
    """The metric by step, with NaN at every gap so the line breaks there instead of bridging it."""
    if inputs.metrics is None:
        return [], []
    series = inputs.metrics.series(inputs.metric_name)
    gaps = inputs.record.chain.coverage.gaps
    points: dict[float, float] = {float(s): v for s, v in series.items()}
    for a, b in gaps:
        points[(a + b) / 2] = math.nan
    steps = sorted(points)
    return steps, [points[s] for s in steps]


def _x_range(r: CompletionRecord, inputs: ReportInputs, xs: list[float]) -> tuple[float, float]:
    values: list[float] = list(xs) + [float(s) for s in inputs.checkpoint_steps] + [c.step for c in r.candidates]
    for a in r.chain.attempts:
        values += [v for v in (a.first_step, a.last_step) if v is not None]
    values += [v for v in (r.chain.coverage.first_step, r.chain.coverage.last_step, r.step_budget) if v is not None]
    if not values:
        return 0.0, 1.0
    return min(0.0, min(values)) - 0.5, max(values) + 1.0


def _pixel(fig: Any, ax: Any, x: float, y: float) -> tuple[int, int]:
    px, py = ax.transData.transform((x, y))
    height = fig.get_figheight() * fig.dpi
    return round(float(px)), round(float(height - py))


def has_timeline(r: CompletionRecord) -> bool:
    return bool(r.chain.attempts or r.candidates)


# Pictures drawn in this process by what they show (_drawn_from): a grant refreshes the report of a record whose
# picture rarely changes, and drawing it (PNG and SVG) is most of a report's time (~0.5 s). A few entries only.
_DRAWN: OrderedDict[str, TimelineImage] = OrderedDict()
_DRAWN_KEPT = 8
_DRAWN_LOCK = threading.Lock()


def _drawn_from(inputs: ReportInputs, xs: list[float], ys: list[float]) -> str:
    """Everything render_timeline draws from, and nothing else (a field it starts to read belongs here too)."""
    r = inputs.record
    coverage = r.chain.coverage
    return json.dumps(
        [
            r.run_id,
            [(a.attempt_id, a.state, a.first_step, a.last_step) for a in r.chain.attempts],
            [list(gap) for gap in coverage.gaps],
            [coverage.first_step, coverage.last_step, r.step_budget],
            r.first_failure_cause.attempt_id if r.first_failure_cause else None,
            [(c.step, c.valid) for c in r.candidates],
            list(marked_step(r)),
            r.selection.metric_window if r.selection else None,
            list(inputs.checkpoint_steps),
            inputs.metric_name,
            xs,
            ys,
        ],
        default=str,
    )


def render_timeline(inputs: ReportInputs) -> TimelineImage | None:
    if not has_timeline(inputs.record):
        return None
    xs, ys = _metric_points(inputs)
    key = _drawn_from(inputs, xs, ys)
    with _DRAWN_LOCK:
        drawn = _DRAWN.get(key)
    if drawn is None:
        drawn = _draw(inputs, xs, ys)  # outside the lock: two threads may draw one picture, never block on it
    with _DRAWN_LOCK:
        _DRAWN[key] = drawn
        _DRAWN.move_to_end(key)
        while len(_DRAWN) > _DRAWN_KEPT:
            _DRAWN.popitem(last=False)
    return replace(drawn, probes=dict(drawn.probes))  # the caller's own copy


def _draw(inputs: ReportInputs, xs: list[float], ys: list[float]) -> TimelineImage:
    r = inputs.record
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    gaps = [(a, b) for a, b in r.chain.coverage.gaps]
    rows = [f"{a.attempt_id} ({a.state or '?'})" for a in r.chain.attempts] + ["checkpoints", "exports"]
    chain_h = 0.9 + 0.38 * len(rows)
    metric_h = 2.4 if xs else 0.0
    fig = Figure(figsize=(WIDTH_IN, chain_h + metric_h + 1.2), dpi=DPI)  # + a row for the legend
    FigureCanvasAgg(fig)
    if xs:
        grid = fig.add_gridspec(2, 1, height_ratios=[chain_h, metric_h], hspace=0.12)
        ax = fig.add_subplot(grid[0])
        mx = fig.add_subplot(grid[1], sharex=ax)
    else:
        ax, mx = fig.add_subplot(1, 1, 1), None
    fig.subplots_adjust(left=0.17, right=0.97, top=1 - 0.75 / fig.get_figheight(), bottom=0.55 / fig.get_figheight())
    lo, hi = _x_range(r, inputs, xs)
    ax.set_xlim(lo, hi)
    ax.set_ylim(len(rows) - 0.5, -0.5)  # first attempt on top
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.set_title(f"{r.run_id}: chain of {len(r.chain.attempts)} attempt(s)", fontsize=10, loc="left", pad=20)
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if r.step_budget is not None:
        ax.axvline(r.step_budget, color="#444444", linestyle=":", linewidth=1)
        ax.text(r.step_budget, -0.5, f"budget {r.step_budget} ", ha="right", va="bottom", fontsize=7, color="#444444")
    ax.set_axisbelow(True)
    for a, b in gaps:  # light band across the chain: the steps no attempt logged
        ax.axvspan(a - 0.5, b + 0.5, color=GAP_RED, alpha=0.18, linewidth=0)
    anchors: dict[str, tuple[float, float]] = {}  # data (x, y); pixels are known only after draw()
    # Bars stop at the budget line: steps past the budget are not the run's (a restarted trainer's overrun).
    clip = r.step_budget + 0.5 if r.step_budget is not None else math.inf
    cause = r.first_failure_cause.attempt_id if r.first_failure_cause else None
    for i, att in enumerate(r.chain.attempts):
        if att.first_step is None or att.last_step is None:
            ax.text(lo + 0.3, i, "no metric rows", va="center", fontsize=8, color=OTHER_STATE)
            continue
        colour = attempt_colour(att.state)
        for start, end, is_gap in _segments(att.first_step, att.last_step, gaps):
            end = min(end, clip)
            if end <= start:
                continue
            ax.barh(i, end - start, left=start, height=0.56, color=GAP_RED if is_gap else colour, linewidth=0)
            key = f"gap:{att.attempt_id}" if is_gap else f"attempt:{att.attempt_id}"
            anchors.setdefault(key, ((start + end) / 2, i))
        if att.attempt_id == cause:  # the first causal error ended this attempt: mark where its steps stop
            at = min(att.last_step + 0.5, clip)
            ax.scatter([at], [i], marker="X", s=90, color=GAP_RED, edgecolors="#ffffff", linewidths=0.8, zorder=6)
            ax.annotate("first cause", (at, i), xytext=(6, 0), textcoords="offset points", va="center", fontsize=7)
            anchors["failure"] = (at, i)
    ckpt_row, export_row = len(rows) - 2, len(rows) - 1
    if inputs.checkpoint_steps:
        ax.scatter(
            inputs.checkpoint_steps, [ckpt_row] * len(inputs.checkpoint_steps), marker="|", s=160, color=CHECKPOINT_BLUE
        )
    for c in r.candidates:
        ax.scatter(
            [c.step], [export_row], marker="D" if c.valid else "X", s=42, color=EXPORT_PURPLE if c.valid else "#000000"
        )
    # The candidates table's marked row (report/candidates.py): the policy's selection, a publish grant's choice,
    # else the best by the suggestion's score (issue 47: the best step was a note in row 36, not on the chart).
    selected, label = marked_step(r)
    if selected is not None:
        ax.scatter([selected], [export_row], marker="*", s=220, color=SELECTED_GOLD, zorder=5)
        ax.annotate(
            f"{label} {selected}",
            (selected, export_row),
            xytext=(0, -14),
            textcoords="offset points",
            ha="center",
            fontsize=7,
            color=SELECTED_GOLD,
        )
        anchors["marked"] = (selected, export_row)
    _legend(ax, r, cause is not None)
    if mx is not None:
        _metric_panel(mx, inputs, xs, ys, gaps, selected, label)
        for tick in ax.get_xticklabels():
            tick.set_visible(False)
    else:
        ax.set_xlabel("trainer step")
    fig.canvas.draw()
    probes = {k: _pixel(fig, ax, x, y) for k, (x, y) in anchors.items()}
    png, svg = io.BytesIO(), io.StringIO()
    fig.savefig(png, format="png", dpi=DPI, metadata={"Software": None})
    import matplotlib

    with matplotlib.rc_context({"svg.hashsalt": "rlcleanup", "svg.fonttype": "none"}):
        fig.savefig(svg, format="svg", metadata={"Date": None, "Creator": None})
    return TimelineImage(png=png.getvalue(), svg=_inline_svg(svg.getvalue()), metric=inputs.metric_name, probes=probes)


def _legend(ax: Any, r: CompletionRecord, with_cause: bool) -> None:
    """What every colour and mark of the chain panel means, drawn above it (outside the bars)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    states = {(a.state or "").lower() for a in r.chain.attempts}
    handles: list[Any] = [Patch(color=STATE_COLOURS["succeeded"], label="succeeded")]
    if "failed" in states:
        handles.append(Patch(color=STATE_COLOURS["failed"], label="failed"))
    if states - set(STATE_COLOURS):
        handles.append(Patch(color=OTHER_STATE, label="other state"))
    handles.append(Patch(color=GAP_RED, alpha=0.5, label="coverage gap"))
    handles.append(Line2D([], [], marker="|", linestyle="", markersize=9, color=CHECKPOINT_BLUE, label="checkpoint"))
    handles.append(Line2D([], [], marker="D", linestyle="", markersize=5, color=EXPORT_PURPLE, label="valid export"))
    if any(not c.valid for c in r.candidates):
        handles.append(Line2D([], [], marker="X", linestyle="", markersize=6, color="#000000", label="invalid export"))
    if with_cause:
        handles.append(Line2D([], [], marker="X", linestyle="", markersize=7, color=GAP_RED, label="first cause"))
    if r.step_budget is not None:
        handles.append(Line2D([], [], linestyle=":", color="#444444", label="step budget"))
    ax.legend(
        handles=handles,
        loc="lower left",
        bbox_to_anchor=(0.0, 1.0),
        ncol=len(handles),
        fontsize=7,
        frameon=False,
        handlelength=1.2,
        columnspacing=1.0,
    )


def _metric_panel(
    mx: Any,
    inputs: ReportInputs,
    xs: list[float],
    ys: list[float],
    gaps: list[tuple[int, int]],
    selected: int | None,
    label: str,
) -> None:
    r = inputs.record
    window = r.selection.metric_window if r.selection else None
    if window and len(window) == 2:
        mx.axvspan(window[0] - 0.5, window[1] + 0.5, color=WINDOW_YELLOW, alpha=0.7, linewidth=0, label="metric window")
    for a, b in gaps:
        mx.axvspan(a - 0.5, b + 0.5, color=GAP_RED, alpha=0.25, linewidth=0)
    mx.plot(xs, ys, color=CURVE_BLUE, linewidth=1.4, label=inputs.metric_name)
    if selected is not None:
        mx.axvline(selected, color=SELECTED_GOLD, linestyle="--", linewidth=1.2, label=f"{label} step {selected}")
    mx.set_ylabel(_short(inputs.metric_name), fontsize=8)
    mx.set_xlabel("trainer step")
    mx.grid(color="#eeeeee", linewidth=0.6)
    mx.legend(fontsize=7, loc="best", frameon=False)


def _short(name: str) -> str:
    return name if len(name) <= 28 else "…" + name[-27:]


_PROLOG = re.compile(r"^.*?(?=<svg\b)", re.S)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.S)


def _inline_svg(text: str) -> str:
    """Drop the XML prolog/doctype and the RDF metadata (it names external vocabularies by URL)."""
    return _METADATA.sub("", _PROLOG.sub("", text, count=1))
