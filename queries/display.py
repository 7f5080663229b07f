"""Shaping a query's rows for a chart: an x window and downsampling of long step series.

These are the `_x_from`, `_x_to` and `_points` parameters of GET /api/queries/{name}: the
rows the REST API returns, cut to the window, then bucketed to at most `_points` x values.
"""
from __future__ import annotations

import math
from typing import Any

# Points per chart the browser gets: enough to see a 10,000-step run's shape, few enough
# that zoom and hover stay fluid. Heatmaps pay per cell, so they get fewer columns.
MAX_POINTS = 600
MAX_HEATMAP_COLUMNS = 300


def _group_columns(chart: dict) -> list[str]:
    keys = [chart.get("color"), chart.get("group")]
    if chart.get("kind") == "heatmap":
        keys.append(chart.get("y", [None])[0])
    return [k for k in keys if k]


def downsample(columns: list[str], rows: list[list], chart: dict | None,
               max_points: int) -> tuple[list[list], dict | None]:
    """Bucket rows over consecutive integer x values (steps) when there are too many.

    Each bucket of `width` steps becomes one point at its first step, per series (the
    chart's color column, and a heatmap's y): numeric columns are averaged, others keep
    their first value. Returns the rows and a note saying what was done, or None.
    """
    x = (chart or {}).get("x")
    if x not in columns or chart.get("kind") in ("table", "hist"):
        return rows, None
    xi = columns.index(x)
    xs = {r[xi] for r in rows if isinstance(r[xi], int) and not isinstance(r[xi], bool)}
    if chart.get("kind") == "heatmap":
        max_points = min(max_points, MAX_HEATMAP_COLUMNS)
    if len(xs) <= max_points or len(xs) != len({r[xi] for r in rows}):
        return rows, None
    lo, hi = min(xs), max(xs)
    width = math.ceil((hi - lo + 1) / max_points)
    keys = [columns.index(c) for c in _group_columns(chart) if c in columns and c != x]
    buckets: dict[tuple, list[list]] = {}
    for r in rows:
        start = lo + (r[xi] - lo) // width * width
        buckets.setdefault((start, *(r[k] for k in keys)), []).append(r)
    out = []
    for (start, *_), members in buckets.items():
        row = []
        for i in range(len(columns)):
            vals = [m[i] for m in members if m[i] is not None]
            if i == xi:
                row.append(start)
            elif i in keys or not vals or not all(isinstance(v, (int, float)) for v in vals):
                row.append(members[0][i])
            else:
                row.append(sum(vals) / len(vals))
        out.append(row)
    note = {"steps": len(xs), "points": len({r[xi] for r in out}), "width": width}
    return out, note


def x_bounds(columns: list[str], rows: list[list], x: str | None) -> list | None:
    """[min, max] of the x column over every row, before any window: the range the page offers."""
    if x not in columns:
        return None
    i = columns.index(x)
    xs = [r[i] for r in rows if isinstance(r[i], (int, float)) and not isinstance(r[i], bool)]
    return [min(xs), max(xs)] if xs else None


class WindowError(ValueError):
    """A window asked of an x axis that is no number line (a histogram's bucket labels)."""


def window(columns: list[str], rows: list[list], x: str | None,
           x_from: int | None, x_to: int | None) -> list[list]:
    """The rows whose x lies in [x_from, x_to] (either end open when None). Raises WindowError
    when the x column holds labels, not numbers."""
    if x not in columns or (x_from is None and x_to is None):
        return rows
    i = columns.index(x)
    if any(not _number(r[i]) for r in rows if r[i] is not None):
        raise WindowError(f"its x axis ({x}) holds labels, not steps: _x_from and _x_to window a step axis")
    lo = -math.inf if x_from is None else x_from
    hi = math.inf if x_to is None else x_to
    return [r for r in rows if r[i] is not None and lo <= r[i] <= hi]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def for_chart(columns: list[str], rows: list[list], chart: dict | None, points: int | None,
              x_from: int | None, x_to: int | None) -> dict[str, Any]:
    """A result shaped for a chart: the window, then downsampling; the extra keys of the body."""
    x = (chart or {}).get("x")
    bounds = x_bounds(columns, rows, x)
    rows = window(columns, rows, x, x_from, x_to)
    note = None
    if points is not None:
        rows, note = downsample(columns, rows, chart, points)
    return {"rows": rows, "downsampled": note, "x_bounds": bounds}
