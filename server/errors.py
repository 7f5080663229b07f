"""The one error shape: {"ok": false, "error": "<one line>", "status": N}; a browser's navigation
outside the API gets it as the dashboard's error page."""
from __future__ import annotations

import logging

import duckdb
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from polytrace.ingest.contract import IngestError
from polytrace.ingest.load import NO_SPACE, DiskFull, RunConflict, root_cause
from polytrace.queries.runner import OutOfMemory
from polytrace.server.db import Busy, Closing

log = logging.getLogger("polytrace.server")


class ErrorBody(BaseModel):
    """Every 4xx and 5xx answer has this body."""

    ok: bool = False
    error: str
    status: int


def error_responses(*statuses: int) -> dict:
    """An operation's error statuses, for OpenAPI: each answers an ErrorBody."""
    return {s: {"model": ErrorBody} for s in statuses}


def ingest_status(e: IngestError) -> int:
    """The status of an ingest's failure (an upload's or an append's)."""
    if isinstance(e, RunConflict):
        return 409
    if isinstance(e, DiskFull):
        return 507
    # no format recognised the input: unsupported content rather than bad content
    return 415 if e.unrecognised else 400


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


def explained(request: Request, exc: Exception) -> ApiError:
    """Any exception as the status and one-line error the user gets; a bug is logged in full."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, StarletteHTTPException):
        return ApiError(exc.status_code, str(exc.detail), getattr(exc, "headers", None))
    if isinstance(exc, RequestValidationError):
        return ApiError(422, _validation_message(exc))
    if isinstance(exc, Closing):
        return ApiError(503, str(exc))
    if isinstance(exc, Busy):
        return ApiError(503, str(exc), {"Retry-After": "1"})
    if isinstance(exc, (OutOfMemory, duckdb.OutOfMemoryException)):
        return ApiError(507, f"out of the server's memory for queries (POLYTRACE_MEMORY_LIMIT): "
                             f"{str(exc).splitlines()[0]}")
    if isinstance(exc, duckdb.Error):
        cause = root_cause(exc)
        if NO_SPACE in cause:
            return ApiError(507, f"no space left for the database: {cause}")
        if isinstance(exc, duckdb.FatalException):
            log.error("database invalidated on %s %s: %s", request.method, request.url.path, cause)
            return ApiError(503, f"the database must be reopened (restart the server): {cause}")
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return ApiError(500, f"internal error: {type(exc).__name__}")


def _navigation(request: Request) -> bool:
    """A browser opening a page: it asks for HTML, and the path is not the API's."""
    path = request.url.path
    return "text/html" in request.headers.get("accept", "") and not (path == "/api" or path.startswith("/api/"))


def _error_page(request: Request, e: ApiError) -> HTMLResponse:
    from polytrace.server.routers.pages import templates  # the pages import this module

    if e.status == 404:
        return templates.TemplateResponse(request, "missing.html", {"what": f"page {request.url.path!r}"},
                                          status_code=404, headers=e.headers)
    return templates.TemplateResponse(request, "error.html", {"error": e.error}, status_code=e.status,
                                      headers=e.headers)


def install(app: FastAPI) -> None:
    async def answer(request: Request, exc: Exception):
        e = explained(request, exc)
        if _navigation(request):
            return _error_page(request, e)
        return error_response(e.status, e.error, e.headers)

    for kind in (ApiError, StarletteHTTPException, RequestValidationError, duckdb.Error, Exception):
        app.add_exception_handler(kind, answer)
