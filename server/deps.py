"""Annotated dependency aliases shared by the routers, and the bearer-token check for writes."""
from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from server.db import Database
from server.errors import ApiError
from server.settings import Settings

_bearer = HTTPBearer(auto_error=False, scheme_name="token",
                     description="POLYTRACE_TOKEN; POST and DELETE need it when it is set.")


def _db(request: Request) -> Database:
    return request.app.state.db


def _settings(request: Request) -> Settings:
    return request.app.state.settings


DbDep = Annotated[Database, Depends(_db)]
SettingsDep = Annotated[Settings, Depends(_settings)]


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


WriterDep = Depends(require_token)
