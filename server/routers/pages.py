"""Dashboard pages: Jinja2 templates over the same catalog the REST API serves."""
from __future__ import annotations

import os
from importlib import resources

import plotly
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from queries.catalog import load_catalog

router = APIRouter(include_in_schema=False)
_frontend = resources.files("frontend")
templates = Jinja2Templates(directory=str(_frontend.joinpath("templates")))
PLOTLY_JS = os.path.join(os.path.dirname(plotly.__file__), "package_data", "plotly.min.js")


@router.get("/static/plotly.min.js")
def plotly_js() -> FileResponse:
    return FileResponse(PLOTLY_JS, media_type="application/javascript",
                        headers={"Cache-Control": "public, max-age=86400"})


@router.get("/", response_class=HTMLResponse)
def runs_page(request: Request):
    return templates.TemplateResponse(request, "runs.html", {})


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: str):
    catalog = [q.as_dict() for q in load_catalog().values() if q.chart]
    return templates.TemplateResponse(request, "run.html", {"run_id": run_id, "catalog": catalog})


def mount(app: FastAPI) -> None:
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=str(_frontend.joinpath("static"))), name="static")
