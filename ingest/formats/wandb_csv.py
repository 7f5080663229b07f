"""A W&B run history exported as CSV: a `_step` (or `step`) column and one column per metric."""
from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from polytrace.ingest.contract import Format, IngestError, Parsed, Sample
from polytrace.ingest.sniffing import looks_binary
from polytrace.ingest.sources import BATCH_BYTES, read_head, text_stream
from polytrace.ingest.step_metrics import StepMetrics

STEP_COLUMNS = ("_step", "step")


def header(head: bytes) -> list[str]:
    text = head.split(b"\n", 1)[0].decode("utf-8", errors="replace").lstrip("\ufeff")
    try:
        return next(csv.reader([text]), [])
    except csv.Error:  # e.g. a stray carriage return inside the header line
        return []


def step_column(names: list[str]) -> str | None:
    lowered = {n.strip().lower(): n for n in names}
    return next((lowered[c] for c in STEP_COLUMNS if c in lowered), None)


def as_numbers(column: pa.Array) -> list[float | None]:
    """Cells as floats; empty or non-numeric cells are None. NaN and infinities are kept."""
    try:
        return column.cast(pa.float64()).to_pylist()
    except pa.ArrowInvalid:
        return [_float(v) for v in column.to_pylist()]


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def read_batches(path: Path) -> Iterator[pa.RecordBatch]:
    """The CSV's rows a batch at a time, every column as text (memory: one batch)."""
    import pyarrow.csv as pacsv  # where used: it is not needed to start up

    head = read_head(path)
    if looks_binary(head[:4096]):
        raise IngestError(path, "binary data, not a CSV export")
    try:
        with text_stream(path) as stream:
            reader = pacsv.open_csv(
                stream,
                read_options=pacsv.ReadOptions(block_size=BATCH_BYTES),
                convert_options=pacsv.ConvertOptions(
                    column_types={n: pa.string() for n in header(head)},
                    null_values=[""], strings_can_be_null=True),
            )
            yield from reader
    except pa.ArrowInvalid as e:
        raise IngestError(path, f"malformed CSV ({str(e).splitlines()[0]})") from None


def parse(path: Path) -> Parsed:
    metrics = StepMetrics()
    skipped, row, step_name = 0, 0, None
    for batch in read_batches(path):
        if step_name is None:
            step_name = step_column(batch.schema.names)
            if step_name is None:
                raise IngestError(path, "no _step or step column in the CSV header")
        steps = as_numbers(batch.column(step_name))
        columns = {n: as_numbers(batch.column(n)) for n in batch.schema.names if n != step_name}
        for i, step in enumerate(steps):
            row += 1
            if step is None or not math.isfinite(step) or step != int(step):
                skipped += 1
                continue
            try:
                metrics.add(int(step), {k: v[i] for k, v in columns.items() if v[i] is not None})
            except IngestError as e:
                raise IngestError(path, f"row {row}: {e.reason}") from None
    if step_name is None:
        raise IngestError(path, "no _step or step column in the CSV header")
    if not metrics.steps:
        raise IngestError(path, f"no row has a whole-number {step_name}")
    warnings = [f"{skipped} row(s) without a whole-number {step_name} skipped"] if skipped else []
    return metrics.parsed("row", warnings=warnings)


def sniff(head: bytes, name: str) -> bool:
    if looks_binary(head) or not name.lower().endswith((".csv", ".csv.gz")):
        return False
    names = header(head)
    if "_step" in names:
        return True
    # A plain `step` column alone could be any table (a samples CSV has one); metric names have slashes.
    return step_column(names) is not None and any("/" in n for n in names)


def sample() -> Sample:
    """Two logged steps with a runtime column and two metrics."""
    return Sample.file("history.csv", b"_step,_runtime,timing_s/gen,response_length/mean\n"
                                      b"1,10.5,6.0,1000\n2,20.5,4.0,1200\n")


FORMAT = Format(
    name="wandb-csv",
    priority=30,
    sniff=sniff,
    parse=parse,
    sample=sample,
    description="W&B history export: CSV with a _step or step column and one column per metric",
)
