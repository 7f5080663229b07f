"""Console logs of training frameworks: their lines cleaned of noise, and the metric dicts they print read back as numeric pairs.

OpenRLHF and slime print a step's metrics as a Python dict repr (`logger.info(f"... {metrics}")`:
`{'train/loss': 0.5, 'perf/x': np.float64(1.0), 'flag': True}`), ROLL as JSON. Only numbers are
metrics: ints, floats (`nan`, `inf` too) and numpy or torch scalars printed as `np.float64(x)` or
`tensor(x)`; strings, bools, None, lists and nested dicts are skipped. A dict cut before its
closing brace (a crashed run's last line) yields None, not a guess.
"""
from __future__ import annotations

import json
import re

from collections.abc import Callable, Iterator
from pathlib import Path

from polytrace.ingest.contract import IngestError, Parsed
from polytrace.ingest.sniffing import looks_binary
from polytrace.ingest.sources import line_blocks
from polytrace.ingest.step_metrics import StepMetrics

OPENERS, CLOSERS = "([{", ")]}"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
RAY_PREFIX = re.compile(r"\s*\([\w.-]*\s*pid=\d+[^)]*\)\s*")


def number(text: str) -> float | None:
    """A logged value as a float (`np.float64(x)`, `np.int32(x)` unwrapped); None when not a number."""
    text = text.strip()
    if text.endswith(")"):
        opened = text.find("(")
        if opened <= 0:
            return None
        text = text[opened + 1:-1].partition(",")[0]
    try:
        return float(text)
    except ValueError:
        return None


def clean(line: str) -> str:
    """The line without ANSI colour codes and without a leading Ray `(Actor pid=N, ip=...)` or
    `(pid=N)` prefix."""
    if "\x1b" in line:
        line = ANSI.sub("", line)
    if "pid=" in line:
        prefix = RAY_PREFIX.match(line)
        if prefix:
            line = line[prefix.end():]
    return line


def repr_pairs(text: str, start: int) -> dict[str, float] | None:
    """The numeric items of the Python dict repr opening at text[start] ('{'), or None if it is
    cut short."""
    out: dict[str, float] = {}
    i, end = start + 1, len(text)
    while i < end:
        while i < end and text[i] == " ":
            i += 1
        if i < end and text[i] == "}":
            return out
        key, i = _item(text, i, ":")
        if key is None:
            return None
        value, i = _item(text, i + 1, ",}")
        if value is None:
            return None
        key = key.strip()
        if key[:1] in "'\"" and key[-1:] == key[:1] and len(key) >= 2:
            parsed = number(value) if value.strip()[:1] not in "'\"[{" else None
            if parsed is not None:
                out[key[1:-1]] = parsed
        if text[i] == "}":
            return out
        i += 1
    return None


def _item(text: str, i: int, stops: str) -> tuple[str | None, int]:
    """The text from i to the first of `stops` outside quotes and brackets, and that stop's
    index; (None, len) when the text ends first."""
    depth, quote, start = 0, "", i
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in OPENERS:
            depth += 1
        elif c in CLOSERS and depth:
            depth -= 1
        elif c in stops and not depth:
            return text[start:i], i
        i += 1
    return None, i


def json_pairs(text: str) -> dict | None:
    """The JSON object `text`, or None when it is not one (cut, or not JSON)."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def numeric(items: dict) -> dict[str, float]:
    """The items of a decoded JSON object that are numbers (bools are not)."""
    return {k: float(v) for k, v in items.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


class StepDicts:
    """A log's dicts merged per step: one framework prints several dicts for one step (train and
    eval, or one per process), which together are that step's one tracker row."""

    def __init__(self) -> None:
        self.steps: dict[int, dict[str, float]] = {}

    def add(self, step: int, values: dict[str, float]) -> None:
        self.steps.setdefault(step, {}).update(values)

    def metrics(self) -> StepMetrics:
        metrics = StepMetrics()
        for step in sorted(self.steps):
            metrics.add(step, self.steps[step])
        return metrics



def parse_log(path: Path, framework: str, display: str, unit: str, missing: str,
              metric_lines: Callable[[str], Iterator[tuple[int, dict[str, float]]]]) -> Parsed:
    """A console log's step_metrics, read a batch of whole lines at a time: `metric_lines` yields
    (step, values) for a batch's metric lines; `missing` says which line none was found of."""
    steps = StepDicts()
    for offset, block in line_blocks(path):
        if not offset and looks_binary(block[:4096]):
            raise IngestError(path, f"binary data, not a {display} console log")
        # blocks end at a newline, so no UTF-8 sequence is split between two of them
        for step, values in metric_lines(block.decode("utf-8", errors="replace")):
            steps.add(step, values)
    if not steps.steps:
        raise IngestError(path, f"no {missing} found")
    try:
        metrics = steps.metrics()
    except IngestError as e:
        raise IngestError(path, e.reason) from None
    return metrics.parsed(unit, run={"framework": framework})
