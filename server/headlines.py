"""Headline numbers in words: a value as its column's fmt tag reads it, run B's value against
run A's (the compare page's table, and the pages' server-rendered tables), and a list of steps."""
from __future__ import annotations

import math
from typing import Any

from polytrace.queries.render import significant

SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
BYTE_UNITS = ("B", "kB", "MB", "GB", "TB", "PB")
MINUS = "\u2212"


def fmt(kind: str | None, value: Any) -> str:
    """A number as a headline shows it, by its column's fmt tag (queries/README.md): shares as
    percentages, ratios as multiples, durations in a readable unit (h, min, s, ms, µs), GPU-hours,
    and thousands separators for the rest. The charts' formatter (frontend/static/charts/format.js)
    writes every number alike: tests/fixtures/fmt_vectors.json holds both to it."""
    if value is None:
        return "n/a"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    if kind in ("pct", "pct100"):
        return percent(value * 100 if kind == "pct" else value)
    if kind == "x":
        return f"{value:.2f}×" if abs(round(value, 2)) < 10 else f"{value:.1f}×"
    if kind in SECONDS:
        return duration(value * SECONDS[kind])
    if kind == "gpu_h":
        return (f"{value:,.0f}" if abs(value) >= 100 else significant(value)) + " GPU-hours"
    if kind == "bytes":
        return _bytes(value)
    return _plain(value)


def percent(pct: float) -> str:
    """41%, 3.8%, and one significant digit below 0.1% (0.02%), never a 0.0% that is not 0."""
    if abs(pct) >= 10:
        return f"{pct:.0f}%"
    if pct != 0 and abs(pct) < 0.1:
        return f"{significant(pct, 1)}%"
    return f"{pct:.1f}%"


def duration(seconds: float) -> str:
    """Seconds in a readable unit, as the charts write them: h from 3 h, min from 10 min, s, ms, µs."""
    if abs(seconds) >= 3 * 3600:
        return f"{significant(seconds / 3600)} h"
    if abs(seconds) >= 600:
        return f"{seconds / 60:,.0f} min"
    if abs(seconds) >= 100:
        return f"{seconds:,.0f} s"
    if abs(seconds) >= 1 or seconds == 0:
        return f"{seconds:.1f} s"
    # below a second in ms, below a ms in µs, by the value as rounded (0.9996 s reads 1.0 s)
    if abs(float(f"{seconds * 1e3:.3g}")) >= 1000:
        return f"{seconds:.1f} s"
    if abs(float(f"{seconds * 1e6:.3g}")) >= 1000:
        return f"{significant(seconds * 1e3)} ms"
    return f"{significant(seconds * 1e6)} µs"


def _bytes(value: float) -> str:
    unit = 0
    while abs(value) >= 1000 and unit < len(BYTE_UNITS) - 1:
        value, unit = value / 1000, unit + 1
    return f"{value:.0f} {BYTE_UNITS[unit]}" if unit == 0 else f"{significant(value)} {BYTE_UNITS[unit]}"


def _plain(value: float) -> str:
    if isinstance(value, int) or value == int(value):
        return f"{int(value):,}"
    return significant(value) if abs(value) < 1000 else f"{value:,.0f}"


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def difference(kind: str | None, a: Any, b: Any) -> str:
    """B minus A in the column's terms: shares in percentage points ("+12 pp"), durations in
    readable units ("−3.2 s"), the rest as the column reads ("+1,234"); "same" when equal."""
    if not (_number(a) and _number(b)):
        return ""
    d = b - a
    if d == 0:
        return "same"
    sign = "+" if d > 0 else MINUS
    if kind in ("pct", "pct100"):
        return f"{sign}{percent(abs(d) * (100 if kind == 'pct' else 1))[:-1]} pp"
    return sign + fmt(kind, abs(d))


def ratio(a: Any, b: Any) -> str:
    """B over A as a multiple ("B is 1.8× A"); empty when it means nothing (a zero or a sign
    change)."""
    if not (_number(a) and _number(b)) or a == 0 or b / a < 0:
        return ""
    r = b / a
    return "B equals A" if abs(r - 1) < 0.0005 else f"B is {significant(r)}× A"


def step_span(steps: list[int] | None, bridge: bool = False) -> str:
    """Steps in words: a run of consecutive steps as "steps 12–261", two or three runs as
    "steps 1–25 and 236–261", more as "40 steps from 1 to 261". With `bridge`, one missing step
    joins two runs, as the step charts draw them."""
    runs: list[list[int]] = []
    for step in sorted({s for s in steps or [] if s is not None}):
        if runs and step - runs[-1][-1] <= (2 if bridge else 1):
            runs[-1].append(step)
        else:
            runs.append([step])
    if not runs:
        return ""
    shown = [f"{r[0]:,}" if len(r) == 1 else f"{r[0]:,}–{r[-1]:,}" for r in runs]
    if len(runs) == 1 and len(runs[0]) == 1:
        return f"step {shown[0]}"
    if len(runs) <= 3:
        return "steps " + ", ".join(shown[:-1]) + (" and " if len(runs) > 1 else "") + shown[-1]
    return f"{sum(map(len, runs)):,} steps from {runs[0][0]:,} to {runs[-1][-1]:,}"
