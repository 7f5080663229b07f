"""A ready-made samples table: CSV (header line of `samples` column names) or Parquet, one row per response."""
from __future__ import annotations

import io
from pathlib import Path

import pyarrow as pa

from polytrace.ingest.contract import Format, IngestError, Parsed
from polytrace.ingest.formats.polytrace_packed import SAMPLE_TYPES
from polytrace.ingest.sniffing import first_line, looks_binary
from polytrace.ingest.sources import check_utf8, read_bytes

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
        raise IngestError(f"{path.name}: empty file")
    try:
        table = _read_parquet(data) if data.startswith(PARQUET_MAGIC) else _read_csv(data, path.name)
        warnings = []
        if "run_id" in table.column_names:
            table = table.drop_columns(["run_id"])
            warnings.append(f"{path.name}: run_id column ignored (the ingest assigns a new run)")
        _check_columns(table.column_names)
        table = pa.table({c: table.column(c).cast(SAMPLE_TYPES[c]) for c in table.column_names})
        _check_values(table)
    except IngestError as e:
        raise IngestError(f"{path.name}: {e}") from None
    except (pa.ArrowException, ValueError, OSError) as e:  # a corrupt Parquet file raises OSError
        raise IngestError(f"{path.name}: {str(e).splitlines()[0]}") from None
    if not table.num_rows:
        raise IngestError(f"{path.name}: no rows")
    return Parsed(tables={"samples": table}, warnings=warnings)


# pyarrow's compute, csv and parquet modules are imported where used: loading them costs
# ~50 ms of every start-up, also when no table file is read.


def _read_parquet(data: bytes) -> pa.Table:
    import pyarrow.parquet as pq

    return pq.read_table(pa.BufferReader(data))


def _read_csv(data: bytes, name: str) -> pa.Table:
    import pyarrow.csv as pacsv

    check_utf8(data, name)
    names = _header(data[:4096])
    types = {c: SAMPLE_TYPES[c] for c in names if c in SAMPLE_TYPES}
    return pacsv.read_csv(io.BytesIO(data), convert_options=pacsv.ConvertOptions(column_types=types))


def _check_columns(names: list[str]) -> None:
    unknown = [c for c in names if c not in SAMPLE_TYPES]
    if unknown:
        raise IngestError(f"unknown column(s) {', '.join(unknown)}; samples columns are "
                          f"{', '.join(SAMPLE_TYPES)}")
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise IngestError(f"missing required column(s) {', '.join(missing)}")
    if len(set(names)) != len(names):
        raise IngestError("a column name appears twice")


def _check_values(table: pa.Table) -> None:
    import pyarrow.compute as pc

    for c in REQUIRED:
        if table.column(c).null_count:
            raise IngestError(f"column {c} has empty values")
    for c in LENGTHS:
        if c in table.column_names and pc.any(pc.less(table.column(c), 0)).as_py():
            raise IngestError(f"column {c} has a negative length")


FORMAT = Format(
    name="samples-table",
    priority=20,
    sniff=sniff,
    parse=parse,
    description="CSV or Parquet whose columns are named as in the samples table "
                "(step and response_len required)",
)
