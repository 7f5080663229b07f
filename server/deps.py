"""Annotated dependency aliases shared by the routers."""
from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from server.db import Database
from server.settings import Settings


def _db(request: Request) -> Database:
    return request.app.state.db


def _settings(request: Request) -> Settings:
    return request.app.state.settings


DbDep = Annotated[Database, Depends(_db)]
SettingsDep = Annotated[Settings, Depends(_settings)]
