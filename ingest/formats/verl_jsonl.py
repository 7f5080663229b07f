"""verl's file logger: one `{"step": N, "data": {metric: value, ...}}` JSON object per line."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import msgspec

from polytrace.ingest.contract import Format, IngestError, Parsed, Sample
from polytrace.ingest.jsonl import SmallInt, encode_lines
from polytrace.ingest.sniffing import first_line, looks_binary
from polytrace.ingest.sources import line_blocks
from polytrace.ingest.step_metrics import StepMetrics

STEP_THEN_DATA = re.compile(rb'^\{\s*"step"\s*:\s*-?\d+\s*,\s*"data"\s*:\s*\{')


class Line(msgspec.Struct, forbid_unknown_fields=True):
    step: SmallInt
    data: dict[str, Any]


_decoder = msgspec.json.Decoder(Line)


def numeric(data: dict[str, Any]) -> dict[str, float]:
    """Numeric values only (bools are not metrics); nested dicts are skipped."""
    try:
        return {k: float(v) for k, v in data.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)}
    except OverflowError:
        # JSON integers are unbounded; one past the float range is not a metric value
        raise IngestError(None, "a metric value is out of the float range") from None


def decode(line: bytes, number: int, path: Path) -> Line:
    try:
        return _decoder.decode(line)
    except msgspec.DecodeError:
        pass
    except msgspec.ValidationError as e:
        raise IngestError(path, f"line {number}: {e}") from None
    except RecursionError:
        raise IngestError(path, f"line {number}: JSON nested too deeply") from None
    # Python's json module writes NaN and Infinity, which strict JSON decoders reject.
    try:
        obj = json.loads(line, parse_constant=lambda c: {"NaN": math.nan, "Infinity": math.inf,
                                                         "-Infinity": -math.inf}[c])
        return msgspec.convert(obj, Line)
    except (ValueError, msgspec.ValidationError) as e:
        raise IngestError(path, f"line {number}: not a verl metrics line ({e})") from None
    except RecursionError:
        raise IngestError(path, f"line {number}: JSON nested too deeply") from None


def parse(path: Path) -> Parsed:
    metrics = StepMetrics()
    warnings: list[str] = []
    lines_before = 0
    for offset, block in line_blocks(path):
        if not offset and looks_binary(block[:4096]):
            raise IngestError(path, "binary data, not verl JSON lines")
        try:
            rows = _decoder.decode_lines(block)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            rows = _tolerant_rows(block, lines_before, path, warnings)
        lines_before += block.count(b"\n")
        for row in rows:
            try:
                metrics.add(row.step, numeric(row.data))
            except IngestError as e:
                raise IngestError(path, f"step {row.step}: {e.reason}") from None
    if not metrics.steps:
        raise IngestError(path, "no verl metrics line ({\"step\": N, \"data\": {...}})")
    return metrics.parsed("line", run={"framework": "verl"}, warnings=warnings)


def _tolerant_rows(data: bytes, before: int, path: Path, warnings: list[str]) -> list[Line]:
    """Line by line, for NaN/Infinity literals and a cut last line; any other defect is an
    error. `data` is a batch of whole lines that follows `before` lines of the file; only the
    file's last line can lack its newline."""
    lines = data.split(b"\n")
    rows = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(decode(line, before + i, path))
        except IngestError:
            if i < len(lines):
                raise
            warnings.append(f"last line {before + i} is cut off (no newline) and was skipped")
    return rows


def sniff(head: bytes, name: str) -> bool:
    if looks_binary(head):
        return False
    line = first_line(head)
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return bool(STEP_THEN_DATA.match(line))  # a first line longer than the head
    return (isinstance(obj, dict) and set(obj) == {"step", "data"}
            and isinstance(obj["step"], int) and isinstance(obj["data"], dict))


def sample() -> Sample:
    """Two steps of timings and a learning rate; a text value is not a metric."""
    return Sample.file("metrics.jsonl", encode_lines([
        {"step": 1, "data": {"timing_s/gen": 6.0, "timing_s/step": 10, "actor/lr": 1e-06}},
        {"step": 2, "data": {"timing_s/gen": 4.0, "timing_s/step": 8.5, "note": "x"}}]))


FORMAT = Format(
    name="verl-jsonl",
    priority=45,
    sniff=sniff,
    parse=parse,
    sample=sample,
    description='verl file logger: one {"step": N, "data": {...}} JSON object per line',
)
