"""A ready-made samples table: CSV (header line of `samples` column names) or Parquet, one row per response."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from polytrace.ingest.canonical import SAMPLE_TYPES
from polytrace.ingest.contract import Format, IngestError, Parsed, Sample
from polytrace.ingest.sniffing import first_line, looks_binary
from polytrace.ingest.sources import BATCH_BYTES, name_of, read_head, seekable, text_stream

PARQUET_MAGIC = b"PAR1"
REQUIRED = ("step", "response_len")
LENGTHS = ("prompt_len", "response_len", "turn_count", "tool_call_count")


def _header(head: bytes) -> list[str]:
    text = first_line(head).decode("utf-8", "replace").lstrip("\ufeff")  # Excel writes a BOM
    return [c.strip().strip('"').strip() for c in text.split(",")]


def sniff(head: bytes, name: str) -> bool:
    if head.startswith(PARQUET_MAGIC):
        return True
    return not looks_binary(head) and set(REQUIRED) <= set(_header(head))


def parse(path: Path) -> Parsed:
    head = read_head(path)
    if not head.strip():
        raise IngestError(path, "empty file")
    if head.lstrip().startswith((b"{", b"[")):
        raise IngestError(path, "a samples table is CSV or Parquet, and this file is JSON")
    warnings: list[str] = []
    batches = []
    try:
        for batch in _parquet_batches(path) if head.startswith(PARQUET_MAGIC) else _csv_batches(path, head):
            names = batch.schema.names
            if "run_id" in names:
                batch = batch.drop_columns(["run_id"])
                if not warnings:
                    warnings.append(f"{name_of(path)}: run_id column ignored (the ingest assigns a new run)")
            if not batches:
                _check_columns(batch.schema.names)
            table = pa.table({c: batch.column(c).cast(SAMPLE_TYPES[c]) for c in batch.schema.names})
            _check_values(table)
            batches.append(table)
    except (pa.ArrowException, ValueError, OSError) as e:  # a corrupt Parquet file raises OSError
        raise IngestError(path, str(e).splitlines()[0]) from None
    if not any(t.num_rows for t in batches):
        raise IngestError(path, "no rows")
    return Parsed(tables={"samples": pa.concat_tables(batches)}, warnings=warnings)


# pyarrow's compute, csv and parquet modules are imported where used: loading them costs
# ~50 ms of every start-up, also when no table file is read.


def _parquet_batches(path: Path) -> Iterator[pa.RecordBatch]:
    import pyarrow.parquet as pq

    with seekable(path) as at:
        yield from pq.ParquetFile(at).iter_batches()


def _csv_batches(path: Path, head: bytes) -> Iterator[pa.RecordBatch]:
    import pyarrow.csv as pacsv

    names = _header(head[:4096])
    types = {c: SAMPLE_TYPES[c] for c in names if c in SAMPLE_TYPES}
    with text_stream(path) as stream:
        yield from pacsv.open_csv(stream, read_options=pacsv.ReadOptions(block_size=BATCH_BYTES),
                                  convert_options=pacsv.ConvertOptions(column_types=types))


def _check_columns(names: list[str]) -> None:
    unknown = [c for c in names if c not in SAMPLE_TYPES]
    if unknown:
        raise IngestError(None, f"unknown column(s) {', '.join(unknown)}; samples columns are "
                          f"{', '.join(SAMPLE_TYPES)}")
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise IngestError(None, f"missing required column(s) {', '.join(missing)}")
    if len(set(names)) != len(names):
        raise IngestError(None, "a column name appears twice")


def _check_values(table: pa.Table) -> None:
    import pyarrow.compute as pc

    for c in REQUIRED:
        if table.column(c).null_count:
            raise IngestError(None, f"column {c} has empty values")
    for c in LENGTHS:
        if c in table.column_names and pc.any(pc.less(table.column(c), 0)).as_py():
            raise IngestError(None, f"column {c} has a negative length")


def sample() -> Sample:
    """Three samples over two steps: one stopped, one cut at 2048 tokens."""
    return Sample.file("samples.csv", b"step,prompt_id,sample_id,dp_rank,prompt_len,response_len,"
                                      b"finish_reason,truncated\n0,0,0,0,10,100,stop,false\n"
                                      b"0,0,1,1,10,2048,length,true\n1,0,0,0,12,50,stop,false\n")


FORMAT = Format(
    name="samples-table",
    priority=20,
    sniff=sniff,
    parse=parse,
    sample=sample,
    description="CSV or Parquet whose columns are named as in the samples table "
                "(step and response_len required)",
)
