"""The FastAPI application factory."""
from __future__ import annotations

import secrets
from functools import partial

import duckdb
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from swagger_ui_bundle import swagger_ui_path

from polytrace import service
from polytrace import settings as polytrace_settings
from polytrace.server import errors
from polytrace.server.db import Database
from polytrace.server.responses import CompressedStaticFiles, Json
from polytrace.server.routers import live, pages, queries, runs, simulate, uploads
from polytrace.server.read_gate import ReadGate
from polytrace.server.security import HostCheck, SecurityHeaders, csrf_token
from polytrace.server.uploads import remove_stale
from polytrace.server.watch import OverviewLines
from polytrace.settings import Settings

VERSION = "0.1.0"
# /docs is Swagger UI's own page: one line above it leads back to the dashboard
_BACK_TO_DASHBOARD = (b'<p id="dashboard-link" style="margin:0.6rem 1.2rem;font:14px system-ui,sans-serif">'
                      b'<a href="/">&larr; PolyTrace dashboard</a> &middot; <a href="/queries">query catalog</a></p>')


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or polytrace_settings.get()
    db = Database(settings.db, cache_rows=settings.result_cache_rows, lake=settings.lake,
                  memory_limit=settings.memory_limit, threads=settings.threads, query_slots=settings.query_slots)
    remove_stale()  # the temporary folders of uploads a killed server was receiving
    lines, stale = None, None
    if not settings.lake:  # runs an older catalog summed up get their overview line again
        stale = _refreshed(db)
        # live runs' lines, off the append path, summed up without the writer
        read = partial(db.read, timeout_ms=None, what="the runs' overview lines", snapshot=False)
        lines = OverviewLines(db.write, read=read, generation=lambda run_id: db.etag([run_id])).start()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        # the writers first (`serve --watch`'s followers, then the overview lines), the database last
        if watching := getattr(app.state, "watching", None):
            watching.stop()
        if lines:
            lines.stop()
        db.close()

    app = FastAPI(title="PolyTrace", version=VERSION, lifespan=lifespan, default_response_class=Json,
                  docs_url=None, redoc_url=None,
                  description="RLVR trace analytics: where the GPUs went idle and why. "
                              "Every error answers {\"ok\": false, \"error\": \"...\", \"status\": N}.")
    app.state.settings = settings
    app.state.db = db
    app.state.overview_lines = lines
    app.state.stale = stale
    app.state.uploading = {}  # client address -> its uploads in progress
    app.state.secret = secrets.token_bytes(32)
    app.state.csrf_token = csrf_token(app.state.secret)
    errors.install(app)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins,
                           allow_methods=["GET", "POST", "DELETE"],
                           allow_headers=["Authorization", "Content-Type"])
    # outermost last: the Host check runs first, then every answer gets the security headers,
    # then reads show the token where they must
    app.add_middleware(ReadGate, settings=settings)
    app.add_middleware(SecurityHeaders)
    app.add_middleware(HostCheck, settings=settings)
    # the catalog first: FastAPI tries the routes in turn, and most requests are a chart's query
    for resource in (queries, runs, uploads, live, simulate):
        app.include_router(resource.router())
    _documented(app, queries.query_operations())
    _offline_docs(app)
    pages.mount(app)
    return app


def _refreshed(db: Database) -> str | None:
    """Sum up again the runs an older catalog summed up; None, or why they could not be (a full
    disk): the server starts all the same, its pages and /api/health saying so."""
    try:
        db.write(service.refresh_stale)
    except (duckdb.Error, OSError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        return (f"some runs' overview lines and findings are from an older PolyTrace: summing them up again "
                f"failed at start-up ({reason}); free space and restart, or run `polytrace migrate`")
    return None


def _documented(app: FastAPI, operations: list) -> None:
    """/openapi.json with these operations beside the routes the app serves."""
    def openapi() -> dict:
        if app.openapi_schema is None:
            app.openapi_schema = get_openapi(title=app.title, version=app.version, description=app.description,
                                             routes=[*app.routes, *operations])
        return app.openapi_schema

    app.openapi = openapi


def _offline_docs(app: FastAPI) -> None:
    """Swagger UI at /docs from the installed swagger-ui-bundle-v2 package, never a CDN:
    users are often air-gapped."""
    app.mount("/docs-static", CompressedStaticFiles(directory=swagger_ui_path), name="docs-static")

    @app.get("/docs", include_in_schema=False)
    async def docs(request: Request):
        page = get_swagger_ui_html(openapi_url=app.openapi_url, title="PolyTrace API",
                                   swagger_js_url="/docs-static/swagger-ui-bundle.js",
                                   swagger_css_url="/docs-static/swagger-ui.css",
                                   swagger_favicon_url="/docs-static/favicon-32x32.png")
        # Swagger UI starts from an inline script: give it this response's CSP nonce
        nonce = request.state.csp_nonce
        body = page.body.replace(b"<script>", f'<script nonce="{nonce}">'.encode())
        return HTMLResponse(body.replace(b"<body>", b"<body>" + _BACK_TO_DASHBOARD, 1))
