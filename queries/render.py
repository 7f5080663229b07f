"""Renderings of a query Answer: JSON-ready rows, CSV text, Parquet bytes, a terminal table, polars."""
from __future__ import annotations

import csv
import io
import math
from typing import Any

from polytrace.queries.runner import Answer


def jsonable(value: Any) -> Any:
    """A value as JSON carries it: NaN and infinities as null, dates as ISO text, bytes as hex."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    return value


def json_body(answer: Answer) -> dict[str, Any]:
    """The REST body: {"ok", "columns", "rows", "truncated"}; the encoder writes NaN as null."""
    return {"ok": True, "columns": answer.columns, "rows": answer.rows, "truncated": answer.truncated}


def records(answer: Answer) -> list[dict[str, Any]]:
    return [{c: jsonable(v) for c, v in zip(answer.columns, r)} for r in answer.rows]


def csv_text(answer: Answer) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(answer.columns)
    writer.writerows([None if isinstance(v, float) and not math.isfinite(v) else v for v in row]
                     for row in answer.rows)
    return out.getvalue()


def parquet_bytes(answer: Answer) -> bytes:
    import pyarrow.parquet as pq  # where used: it is not needed to start up

    sink = io.BytesIO()
    pq.write_table(answer.table, sink)
    return sink.getvalue()


def terminal_table(answer: Answer):
    """A rich Table: floats to 4 significant digits, NULL as blank."""
    from rich.table import Table

    table = Table(*answer.columns)
    for r in answer.rows:
        table.add_row(*("" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v) for v in r))
    return table


def polars(answer: Answer):
    import polars as pl

    return pl.from_arrow(answer.table)
