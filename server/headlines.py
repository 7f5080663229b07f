"""Headline findings: run_summary's numbers turned into plain sentences for the run page."""
from __future__ import annotations

import math
import re
from typing import Any

# How a run_summary column's number reads, decided by its name: shares as percentages,
# ratios as multiples, durations in seconds, everything else as a plain number.
_PERCENT = re.compile(r"(_frac|_share|_pct|_rate|_hit|cap_ratio|_util)(_|$)")
_TIMES = re.compile(r"(imbalance|_ratio|speedup)(_|$)")
_SECONDS = re.compile(r"(_s|_sec|_seconds)$")
_HOURS = re.compile(r"_hours?$|_h$")


def fmt(name: str, value: Any) -> str:
    """A number as a headline shows it."""
    if value is None:
        return "n/a"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if _PERCENT.search(name):
        pct = value if name.endswith("_pct") else value * 100
        return f"{pct:.0f}%" if abs(pct) >= 10 else f"{pct:.1f}%"
    if _TIMES.search(name):
        return f"{value:.2f}×" if abs(value) < 10 else f"{value:.1f}×"
    if _SECONDS.search(name):
        return f"{value:.1f} s" if value < 100 else f"{value:,.0f} s"
    if _HOURS.search(name):
        unit = " GPU-hours" if "gpu_hours" in name else " h"
        return (f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}") + unit
    if isinstance(value, int) or (math.isfinite(value) and value == int(value)):
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


def findings(row: dict[str, Any], docs: dict[str, str]) -> list[list[dict]]:
    """Sentences as lists of parts: {"text"} or {"col", "value", "shown"} for a number.

    Columns whose description carries a sentence template render through it, in column
    order, when their numbers are known. Only when no column has a template does each
    non-null column become '<description>: <value>.'
    """
    templates = {n: t for n, d in docs.items() if (t := _sentence_template(d or ""))}
    out: list[list[dict]] = []
    for name, template in templates.items():
        template = _drop_null_asides(template, row)
        if all(row.get(n) is not None for n in [name, *_placeholders(template)]):
            out.append(_parts(template, row))
    if templates:
        return out
    for name, value in row.items():
        if value is None or name == "run_id" or name not in docs:
            continue
        label = (docs[name] or name).rstrip(". ")
        out.append([{"text": f"{label}: "}, _number(name, value), {"text": "."}])
    return out


def _number(name: str, value: Any) -> dict:
    return {"col": name, "value": value, "shown": fmt(name, value)}


def _parts(template: str, row: dict[str, Any]) -> list[dict]:
    parts: list[dict] = []
    for i, piece in enumerate(re.split(r"\{(\w+)\}", template)):
        if i % 2:
            parts.append(_number(piece, row.get(piece)))
        elif piece:
            parts.append({"text": piece})
    return parts
