"""A ready-made samples table: CSV (header line of `samples` column names) or Parquet, one row per response."""
from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa

from polytrace.ingest.canonical import SAMPLE_TYPES
from polytrace.ingest.contract import Format, IngestError, Parsed, Sample
from polytrace.ingest.sniffing import first_line, looks_binary
from polytrace.ingest.sources import check_utf8, name_of, read_bytes

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
    data = read_bytes(path)
    if not data or data.isspace():
        raise IngestError(path, "empty file")
    try:
        table = _read_parquet(data) if data.startswith(PARQUET_MAGIC) else _read_csv(data, path)
        warnings = []
        if "run_id" in table.column_names:
            table = table.drop_columns(["run_id"])
            warnings.append(f"{name_of(path)}: run_id column ignored (the ingest assigns a new run)")
        _check_columns(table.column_names)
        table = pa.table({c: table.column(c).cast(SAMPLE_TYPES[c]) for c in table.column_names})
        _check_values(table)
    except (pa.ArrowException, ValueError, OSError) as e:  # a corrupt Parquet file raises OSError
        raise IngestError(path, str(e).splitlines()[0]) from None
    if not table.num_rows:
        raise IngestError(path, "no rows")
    return Parsed(tables={"samples": table}, warnings=warnings)


# pyarrow's compute, csv and parquet modules are imported where used: loading them costs
# ~50 ms of every start-up, also when no table file is read.


def _read_parquet(data: bytes) -> pa.Table:
    import pyarrow.parquet as pq

    return pq.read_table(pa.BufferReader(data))


def _read_csv(data: bytes, path: Path) -> pa.Table:
    import pyarrow.csv as pacsv

    check_utf8(data, path)
    names = _header(data[:4096])
    types = {c: SAMPLE_TYPES[c] for c in names if c in SAMPLE_TYPES}
    return pacsv.read_csv(io.BytesIO(data), convert_options=pacsv.ConvertOptions(column_types=types))


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
