"""Annotated dependency aliases shared by the routers, and the bearer-token check for writes."""
from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request
from fastapi import Path as PathParam
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from polytrace.server.db import Database
from polytrace.server.errors import ApiError
from polytrace.server.security import check_same_origin
from polytrace.settings import Settings
from polytrace.store.runs import RUN_ID

_bearer = HTTPBearer(auto_error=False, scheme_name="token",
                     description="POLYTRACE_TOKEN; POST and DELETE need it when it is set.")


# async: FastAPI runs a plain function dependency on a worker thread, a hop per request
async def _db(request: Request) -> Database:
    return request.app.state.db


async def _settings(request: Request) -> Settings:
    return request.app.state.settings


DbDep = Annotated[Database, Depends(_db)]
SettingsDep = Annotated[Settings, Depends(_settings)]
RunIdPath = Annotated[str, PathParam(pattern=RUN_ID.pattern, description="A run id, as /api/runs lists it.")]


def require_token(settings: SettingsDep,
                  credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> None:
    """Writes need `Authorization: Bearer <POLYTRACE_TOKEN>` when a token is configured."""
    if settings.token is None:
        return
    if credentials is None:
        raise ApiError(401, "this server needs 'Authorization: Bearer <POLYTRACE_TOKEN>' for writes",
                       {"WWW-Authenticate": "Bearer"})
    if not hmac.compare_digest(credentials.credentials.encode(), settings.token.encode()):
        raise ApiError(401, "wrong bearer token", {"WWW-Authenticate": 'Bearer error="invalid_token"'})


def require_writable(db: DbDep) -> None:
    """A server over a Parquet lake only reads it; runs reach a lake through the CLI."""
    if db.lake is not None:
        raise ApiError(405, f"this server reads the Parquet lake {db.lake} and cannot change it; "
                       "add runs with `polytrace ingest --lake` or `polytrace export`", {"Allow": "GET"})


def require_same_origin(request: Request, settings: SettingsDep) -> None:
    """Without a token, browser writes must come from this server's own pages (CSRF)."""
    if settings.token is None:
        check_same_origin(request.headers, request.headers.get("host", ""), settings,
                          request.app.state.secret)


def require_writer(_writable: Annotated[None, Depends(require_writable)],
                   _token: Annotated[None, Depends(require_token)],
                   _origin: Annotated[None, Depends(require_same_origin)]) -> None:
    """Uploads and deletes: a writable database, the bearer token when one is set, and
    without one, a same-origin request."""


WriterDep = Depends(require_writer)
