"""Headline findings: run_summary's numbers turned into plain sentences for the run page."""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from polytrace.queries.catalog import Column

SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
BYTE_UNITS = ("B", "kB", "MB", "GB", "TB", "PB")


def fmt(kind: str | None, value: Any) -> str:
    """A number as a headline shows it, by its column's fmt tag (queries/README.md): shares as
    percentages, ratios as multiples, durations in s (ms or µs below a second), GPU-hours, and
    thousands separators for the rest."""
    if value is None:
        return "n/a"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if not math.isfinite(value):
        return str(value)
    if kind in ("pct", "pct100"):
        pct = value * 100 if kind == "pct" else value
        return f"{pct:.0f}%" if abs(pct) >= 10 else f"{pct:.1f}%"
    if kind == "x":
        return f"{value:.2f}×" if abs(value) < 10 else f"{value:.1f}×"
    if kind in SECONDS:
        return duration(value * SECONDS[kind])
    if kind == "gpu_h":
        return (f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}") + " GPU-hours"
    if kind == "bytes":
        return _bytes(value)
    return _plain(value)


def duration(seconds: float) -> str:
    if abs(seconds) >= 100:
        return f"{seconds:,.0f} s"
    if abs(seconds) >= 1 or seconds == 0:
        return f"{seconds:.1f} s"
    if abs(seconds) >= 1e-3:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"


def _bytes(value: float) -> str:
    unit = 0
    while abs(value) >= 1000 and unit < len(BYTE_UNITS) - 1:
        value, unit = value / 1000, unit + 1
    return f"{value:.0f} {BYTE_UNITS[unit]}" if unit == 0 else f"{value:.3g} {BYTE_UNITS[unit]}"


def _plain(value: float) -> str:
    if isinstance(value, int) or value == int(value):
        return f"{int(value):,}"
    return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def _placeholders(template: str) -> list[str]:
    return re.findall(r"\{(\w+)\}", template)


def _sentence_template(description: str) -> str | None:
    """A column description may carry its sentence after 'Sentence:', with {column}
    placeholders, e.g. 'Sentence: Rollout engines sat idle {rollout_idle_mean} ...'."""
    _, sep, tail = description.partition("Sentence:")
    return tail.strip() if sep else None


def _drop_null_asides(template: str, row: dict[str, Any]) -> str:
    """Remove a parenthetical whose number is missing: '(rank {r}, step {s})' with r NULL."""
    def keep(m: re.Match) -> str:
        return "" if any(row.get(n) is None for n in _placeholders(m.group(0))) else m.group(0)
    return re.sub(r"\s*\([^()]*\)", keep, template)


def findings(row: dict[str, Any], columns: Mapping[str, Column]) -> list[list[dict]]:
    """Sentences as lists of parts: {"text"} or {"col", "value", "shown"} for a number.

    Columns whose description carries a sentence template render through it, in column
    order, when their numbers are known. Only when no column has a template does each
    non-null column become '<description>: <value>.' Numbers read by their column's fmt.
    """
    templates = {n: t for n, c in columns.items() if (t := _sentence_template(c.description or ""))}
    out: list[list[dict]] = []
    for name, template in templates.items():
        template = _drop_null_asides(template, row)
        if all(row.get(n) is not None for n in [name, *_placeholders(template)]):
            out.append(_parts(template, row, columns))
    if templates:
        return out
    for name, value in row.items():
        if value is None or name == "run_id" or name not in columns:
            continue
        label = (columns[name].description or name).rstrip(". ")
        out.append([{"text": f"{label}: "}, _number(name, value, columns), {"text": "."}])
    return out


def _number(name: str, value: Any, columns: Mapping[str, Column]) -> dict:
    column = columns.get(name)
    return {"col": name, "value": value, "shown": fmt(column.fmt if column else None, value)}


def _parts(template: str, row: dict[str, Any], columns: Mapping[str, Column]) -> list[dict]:
    parts: list[dict] = []
    for i, piece in enumerate(re.split(r"\{(\w+)\}", template)):
        if i % 2:
            parts.append(_number(piece, row.get(piece), columns))
        elif piece:
            parts.append({"text": piece})
    return parts
