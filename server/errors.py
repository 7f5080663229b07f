"""The one error shape: {"ok": false, "error": "<one line>", "status": N}."""
from __future__ import annotations

import logging

import duckdb
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from polytrace.ingest.load import NO_SPACE, root_cause

log = logging.getLogger("polytrace.server")


class ErrorBody(BaseModel):
    """Every 4xx and 5xx answer has this body."""

    ok: bool = False
    error: str
    status: int


class ApiError(Exception):
    def __init__(self, status: int, error: str, headers: dict[str, str] | None = None):
        super().__init__(error)
        self.status = status
        self.error = " ".join(str(error).split())
        self.headers = headers


def error_response(status: int, error: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"ok": False, "error": error, "status": status}, status_code=status,
                        headers=headers)


def _validation_message(exc: RequestValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("query", "body", "path"))
    return f"parameter {where!r}: {first.get('msg', 'invalid')}"


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        return error_response(exc.status, exc.error, exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        return error_response(exc.status_code, str(exc.detail), getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        return error_response(422, _validation_message(exc))

    @app.exception_handler(duckdb.Error)
    async def _database_error(request: Request, exc: duckdb.Error):
        cause = root_cause(exc)
        if NO_SPACE in cause:
            return error_response(507, f"no space left for the database: {cause}")
        if isinstance(exc, duckdb.FatalException):
            log.error("database invalidated on %s %s: %s", request.method, request.url.path, cause)
            return error_response(503, f"the database must be reopened (restart the server): {cause}")
        return await _bug(request, exc)

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception):
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, f"internal error: {type(exc).__name__}")
