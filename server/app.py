"""The FastAPI application factory."""
from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from server import errors
from server.db import Database
from server.responses import Json
from server.routers import api, pages
from server.settings import Settings, get_settings

VERSION = "0.1.0"


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    db = Database(settings.db, cache_rows=settings.result_cache_rows)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        db.close()

    app = FastAPI(title="PolyTrace", version=VERSION, lifespan=lifespan, default_response_class=Json,
                  description="RLVR trace analytics: where the GPUs went idle and why. "
                              "Every error answers {\"ok\": false, \"error\": \"...\", \"status\": N}.")
    app.state.settings = settings
    app.state.db = db
    errors.install(app)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins,
                           allow_methods=["GET", "POST", "DELETE"],
                           allow_headers=["Authorization", "Content-Type"])
    app.include_router(api.build_router())
    pages.mount(app)
    return app
