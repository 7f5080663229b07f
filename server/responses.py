"""HTTP responses for a query Answer: JSON (non-finite floats as null), CSV and Parquet."""
from __future__ import annotations

from typing import Any

import msgspec
from fastapi.responses import JSONResponse
from starlette.responses import Response

from polytrace.queries import render
from polytrace.queries.runner import Answer

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


def csv_result(answer: Answer, name: str) -> Response:
    return Response(render.csv_text(answer), media_type=MEDIA_TYPES["csv"],
                    headers={**_disposition(name, "csv"), **_truncated_header(answer.truncated)})


def parquet_result(answer: Answer, name: str) -> Response:
    return Response(render.parquet_bytes(answer), media_type=MEDIA_TYPES["parquet"],
                    headers={**_disposition(name, "parquet"), **_truncated_header(answer.truncated)})
