"""HTTP responses for a query Answer: JSON (non-finite floats as null), CSV and Parquet."""
from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

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
    """The format the Accept header prefers most (highest q, then first named) among those we
    serve; a type with q=0 is refused; JSON otherwise."""
    offers = []
    for i, item in enumerate((accept or "").split(",")):
        kind, *params = (part.strip() for part in item.split(";"))
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if kind.lower() in _ACCEPT and q > 0:
            offers.append((-q, i, _ACCEPT[kind.lower()]))
    return min(offers)[2] if offers else "json"


def attachment(filename: str) -> dict[str, str]:
    """A download's Content-Disposition for any name (a run id or query name of HTML or emoji
    included): an ASCII stand-in, and the name itself percent-encoded (RFC 6266)."""
    plain = re.sub(r"[^A-Za-z0-9._-]", "_", filename)
    return {"Content-Disposition": f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(filename, safe='')}"}


def _disposition(name: str, fmt: str) -> dict[str, str]:
    return attachment(f"{name}.{fmt}")


def _truncated_header(truncated: bool) -> dict[str, str]:
    return {"X-PolyTrace-Truncated": "true" if truncated else "false"}


def csv_result(answer: Answer, name: str) -> Response:
    return Response(render.csv_text(answer), media_type=MEDIA_TYPES["csv"],
                    headers={**_disposition(name, "csv"), **_truncated_header(answer.truncated)})


def parquet_result(answer: Answer, name: str) -> Response:
    return Response(render.parquet_bytes(answer), media_type=MEDIA_TYPES["parquet"],
                    headers={**_disposition(name, "parquet"), **_truncated_header(answer.truncated)})
