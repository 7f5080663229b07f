"""Shaping a query's rows for a chart: an x window and downsampling of long step series.

These are the `_x_from`, `_x_to`, `_points`, `_since` and `_width` parameters of GET
/api/queries/{name}: the rows the REST API returns, cut to the window, then bucketed to at most
`_points` x values. `_since` asks only a step series' rows from a step on (what a live page
lacks), computed with the step in the query's SQL; `_width` buckets them as the page's rows are.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from polytrace.queries.catalog import Query

# Points per chart the browser gets: enough to see a 10,000-step run's shape, few enough
# that zoom and hover stay fluid. Heatmaps pay per cell, so they get fewer columns.
MAX_POINTS = 600
MAX_HEATMAP_COLUMNS = 300


def _group_columns(chart: dict) -> list[str]:
    keys = [chart.get("color"), chart.get("group")]
    if chart.get("kind") == "heatmap":
        keys.append(chart.get("y", [None])[0])
    return [k for k in keys if k]


def steps_on_x(chart: dict | None) -> bool:
    """Whether a chart draws a step series: its x is the training step (the charts of a page that
    share one step range, and whose new steps a live page fetches alone)."""
    return bool(chart) and chart.get("x") == "step" and chart.get("kind") not in ("table", "hist")


def since(query: Query, step: int) -> Query:
    """`query` answering only its rows from `step` on: its SQL filtered on the step, which DuckDB
    pushes down to where the steps are read as far as the query lets it (a step series' rows each
    come from their own step's rows)."""
    sql = f'SELECT * FROM (\n{query.sql}\n) AS answer WHERE answer."step" >= {int(step)}'
    return dataclasses.replace(query, sql=sql)


def _steps(columns: list[str], rows: list[list], chart: dict | None) -> set[int] | None:
    """The distinct integer x values (steps) of a bucketable chart's rows, or None when its rows
    are no step series (a table, a histogram, an x of floats or labels)."""
    x = (chart or {}).get("x")
    if x not in columns or chart.get("kind") in ("table", "hist"):
        return None
    xi = columns.index(x)
    xs = {r[xi] for r in rows if isinstance(r[xi], int) and not isinstance(r[xi], bool)}
    return xs if len(xs) == len({r[xi] for r in rows}) else None


def downsample(columns: list[str], rows: list[list], chart: dict | None,
               max_points: int) -> tuple[list[list], dict | None]:
    """Bucket rows over consecutive integer x values (steps) when there are too many: buckets of
    the fewest steps that make at most `max_points` of them, from the first step (`buckets`).
    Returns the rows and a note saying what was done, or None."""
    xs = _steps(columns, rows, chart)
    if chart and chart.get("kind") == "heatmap":
        max_points = min(max_points, MAX_HEATMAP_COLUMNS)
    if xs is None or len(xs) <= max_points:
        return rows, None
    lo, hi = min(xs), max(xs)
    return buckets(columns, rows, chart, lo, math.ceil((hi - lo + 1) / max_points))


def buckets(columns: list[str], rows: list[list], chart: dict, origin: int,
            width: int) -> tuple[list[list], dict | None]:
    """Rows bucketed `width` steps a bucket, the buckets starting at step `origin`.

    Each bucket becomes one point at its first step, per series (the chart's color column, and a
    heatmap's y): numeric columns are averaged, others keep their first value. The note counts the
    steps, the points, the width and the steps in the last bucket (what a live page replaces when
    it fetches the steps from that bucket on); None when the rows are no step series."""
    xs = _steps(columns, rows, chart)
    if xs is None or not xs:
        return rows, None
    x = chart["x"]
    xi = columns.index(x)

    def start_of(step: int) -> int:
        return origin + (step - origin) // width * width

    keys = [columns.index(c) for c in _group_columns(chart) if c in columns and c != x]
    grouped: dict[tuple, list[list]] = {}
    for r in rows:
        grouped.setdefault((start_of(r[xi]), *(r[k] for k in keys)), []).append(r)
    out = []
    for (start, *_), members in grouped.items():
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
    last = start_of(max(xs))
    note = {"steps": len(xs), "points": len({r[xi] for r in out}), "width": width,
            "last_bucket_steps": sum(1 for s in xs if s >= last)}
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
              x_from: int | None, x_to: int | None, since: int | None = None,
              width: int | None = None) -> dict[str, Any]:
    """A result shaped for a chart: the rows from `since` (an answer kept whole holds the steps
    before it too), the window, then the buckets of `width` steps from `since`, or downsampling
    to `points`; the extra keys of the body. `x_bounds` are those of the rows from `since`."""
    x = (chart or {}).get("x")
    rows = window(columns, rows, x, since, None)
    bounds = x_bounds(columns, rows, x)
    rows = window(columns, rows, x, x_from, x_to)
    note = None
    if width is not None:
        rows, note = buckets(columns, rows, chart, since, width)
    elif points is not None:
        rows, note = downsample(columns, rows, chart, points)
    return {"rows": rows, "downsampled": note, "x_bounds": bounds}
