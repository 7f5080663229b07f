"""Renderings of a query result: JSON (non-finite floats as null), CSV and Parquet."""
from __future__ import annotations

import csv
import io
import math
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
from fastapi.responses import JSONResponse
from starlette.responses import Response

from polytrace.queries.catalog import Result

FORMATS = ("json", "csv", "parquet")
MEDIA_TYPES = {
    "json": "application/json",
    "csv": "text/csv; charset=utf-8",
    "parquet": "application/vnd.apache.parquet",
}
_ACCEPT = {
    "application/json": "json",
    "text/csv": "csv",
    "application/vnd.apache.parquet": "parquet",
    "application/x-parquet": "parquet",
}
# msgspec writes NaN and infinities as null, which is what JSON clients can read.
_encoder = msgspec.json.Encoder(decimal_format="number", enc_hook=str)


class Json(JSONResponse):
    """JSONResponse that never fails on NaN, Decimal or dates."""

    def render(self, content: Any) -> bytes:
        return _encoder.encode(content)


def negotiate(accept: str | None) -> str:
    """The first format the Accept header names that we serve; JSON otherwise."""
    for item in (accept or "").split(","):
        kind = item.split(";")[0].strip().lower()
        if kind in _ACCEPT:
            return _ACCEPT[kind]
    return "json"


def _disposition(name: str, fmt: str) -> dict[str, str]:
    return {"Content-Disposition": f'attachment; filename="{name}.{fmt}"'}


def _truncated_header(truncated: bool) -> dict[str, str]:
    return {"X-PolyTrace-Truncated": "true" if truncated else "false"}


def json_result(result: Result) -> Response:
    return Json({"ok": True, "columns": result.columns, "rows": result.rows,
                 "truncated": result.truncated})


def _csv_value(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def csv_result(result: Result, name: str) -> Response:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(result.columns)
    writer.writerows([_csv_value(v) for v in row] for row in result.rows)
    return Response(out.getvalue(), media_type=MEDIA_TYPES["csv"],
                    headers={**_disposition(name, "csv"), **_truncated_header(result.truncated)})


def parquet_result(table: pa.Table, truncated: bool, name: str) -> Response:
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return Response(sink.getvalue(), media_type=MEDIA_TYPES["parquet"],
                    headers={**_disposition(name, "parquet"), **_truncated_header(truncated)})
