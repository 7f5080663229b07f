"""Dashboard pages: Jinja2 templates over the same catalog and runner the REST API serves."""
from __future__ import annotations

import os
from functools import partial
from importlib import resources
from typing import Any
from urllib.parse import urlencode

import plotly
from fastapi import APIRouter, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from polytrace.queries.catalog import SECTIONS, Column, Query, load_catalog
from polytrace.queries.display import MAX_POINTS
from polytrace.queries.render import jsonable
from polytrace.queries.runner import QueryTimeout
from polytrace.server.db import Database
from polytrace.server.deps import DbDep, SettingsDep
from polytrace.server.errors import ApiError, error_response
from polytrace.server.headlines import findings, fmt
from polytrace.server.routers.api import DISPLAY_PARAMS, chart_body

router = APIRouter(include_in_schema=False)
# The raw views (query page, headline numbers): as many points as `_points` allows.
EVERY_ROW = DISPLAY_PARAMS["_points"][2]
_frontend = resources.files("polytrace.frontend")
templates = Jinja2Templates(directory=str(_frontend.joinpath("templates")))
PLOTLY_JS = os.path.join(os.path.dirname(plotly.__file__), "package_data", "plotly.min.js")

# The run page's chart sections, in the catalog's order: Runs and Findings are its headlines.
RUN_SECTIONS = tuple(s for s in SECTIONS if s not in ("Runs", "Findings"))
STEP_PARAMS = ("step_from", "step_to")


@router.get("/static/plotly.min.js")
def plotly_js() -> FileResponse:
    return FileResponse(PLOTLY_JS, media_type="application/javascript",
                        headers={"Cache-Control": "public, max-age=86400"})


# ---- data: a catalog query's rows for a chart, as GET /api/queries/{name} answers them ------

def _run_key(query: Query) -> list[str]:
    """Parameters that name a run: run_id, or *_run for queries over two runs."""
    return [p.name for p in query.params if p.name == "run_id" or p.name.endswith("_run")]


def rest_url(name: str, params: dict[str, Any], fmt: str | None = None) -> str:
    shown = {k: v for k, v in params.items() if v not in (None, "")}
    if fmt:
        shown["format"] = fmt
    return f"/api/queries/{name}" + (f"?{urlencode(shown)}" if shown else "")


async def chart_data(db: Database, settings, query: Query, params: dict[str, Any],
                     points: int = MAX_POINTS) -> dict:
    """One chart's rows: the REST body downsampled to `points` steps (`_points`).
    Errors come back in the API's error shape."""
    try:
        body = await chart_body(db, settings, query, {**params, "_points": points})
    except ApiError as e:
        return {"ok": False, "error": e.error, "status": e.status}
    body["rows"] = [[jsonable(v) for v in r] for r in body["rows"]]
    return body


def chart_info(query: Query, params: dict[str, Any]) -> dict:
    """What the renderer needs besides rows: the spec, column docs and the REST URLs."""
    d = query.as_dict()
    spec = query.chart or {"kind": "table"}
    return {
        "name": query.name, "title": spec.get("title") or query.title, "section": query.section,
        "caption": query.description, "chart": spec,
        "columns": {c["name"]: c for c in d["columns"]},
        "params": {k: v for k, v in params.items() if v not in (None, "")},
        "rest": {f: rest_url(query.name, params, None if f == "json" else f)
                 for f in ("json", "csv", "parquet")},
        "linked": spec.get("x") == "step" and spec.get("kind") not in ("table", "hist"),
        "step_params": all(any(p.name == s for p in query.params) for s in STEP_PARAMS),
        "points": MAX_POINTS,
    }


def _has_data(data: dict, chart: dict) -> bool:
    if not data.get("ok"):
        return True  # an error is shown, never hidden
    cols = data["columns"]
    wanted = [c for c in [*chart.get("y", []), chart.get("z")] if c in cols] or cols
    idx = [cols.index(c) for c in wanted]
    return any(r[i] is not None for r in data["rows"] for i in idx)


def run_chart_queries() -> list[Query]:
    """Catalog queries the run page draws: a chart, a dashboard section, and only run_id
    left to fill in (every other parameter has a default)."""
    return [q for q in load_catalog().values()
            if q.chart and q.section in RUN_SECTIONS and _run_key(q) == ["run_id"]
            and all(p.name == "run_id" or not p.required for p in q.params)]


def compare_queries() -> list[Query]:
    """Queries over two runs (two *_run parameters), bound to the compare page's a and b."""
    return [q for q in load_catalog().values()
            if len(_run_key(q)) == 2 and "run_id" not in _run_key(q)
            and all(p.name in _run_key(q) or not p.required for p in q.params)]


async def sections_for(db: Database, settings, run_id: str) -> list[dict]:
    """The run page's sections in order, each with its charts that have data."""
    out = []
    for section in RUN_SECTIONS:
        charts = []
        for q in sorted(run_chart_queries(), key=lambda q: q.name):
            if q.section != section:
                continue
            data = await chart_data(db, settings, q, {"run_id": run_id})
            if _has_data(data, q.chart):
                charts.append({**chart_info(q, {"run_id": run_id}), "data": data})
        if charts:
            out.append({"name": section, "charts": charts})
    return out


async def _catalog_rows(db: Database, settings, name: str, params: dict) -> dict | None:
    query = load_catalog().get(name)
    if query is None:
        return None
    data = await chart_data(db, settings, query, params, points=EVERY_ROW)
    return data if data.get("ok") else None


async def _runs(db: Database, settings) -> list[dict]:
    data = await _catalog_rows(db, settings, "runs", {})
    return [dict(zip(data["columns"], r)) for r in data["rows"]] if data else []


async def _summary(db: Database, settings, run_id: str) -> dict:
    """run_summary's one row with its column docs, and the sentences made from it."""
    data = await _catalog_rows(db, settings, "run_summary", {"run_id": run_id})
    if not data or not data["rows"]:
        return {"row": {}, "sentences": [], "rest": None}
    row = dict(zip(data["columns"], data["rows"][0]))
    return {"row": row, "sentences": findings(row, _summary_columns()),
            "rest": rest_url("run_summary", {"run_id": run_id})}


def _summary_columns() -> dict[str, Column]:
    """run_summary's columns (descriptions, fmt) by name; empty if a site's catalog lacks the query."""
    query = load_catalog().get("run_summary")
    return {c.name: c for c in query.columns} if query else {}


def _not_found(request: Request, what: str) -> HTMLResponse:
    return templates.TemplateResponse(request, "missing.html", {"what": what}, status_code=404)


# ---- pages ---------------------------------------------------------------------------------

@router.get("/", response_class=HTMLResponse)
def runs_page(request: Request, settings: SettingsDep):
    return templates.TemplateResponse(request, "runs.html",
                                      {"needs_token": bool(settings.token)})


async def _can_simulate(db: Database, settings, run_id: str) -> bool:
    """Whether POST /api/runs/{run_id}/whatif would have what it needs."""
    from polytrace.workload.whatif import can_simulate

    return await run_in_threadpool(db.read, partial(can_simulate, run_id=run_id),
                                   settings.query_timeout_ms, f"run {run_id!r}")


@router.get("/runs/{run_id}", response_class=HTMLResponse)
async def run_page(request: Request, run_id: str, db: DbDep, settings: SettingsDep):
    run = next((r for r in await _runs(db, settings) if r["run_id"] == run_id), None)
    if run is None:
        return _not_found(request, f"run {run_id!r}")
    sections = await sections_for(db, settings, run_id)
    # No stored simulation yet: offer one when the run can have it and the server may write.
    offer = (all(s["name"] != "What if" for s in sections) and db.lake is None
             and await _can_simulate(db, settings, run_id))
    return templates.TemplateResponse(request, "run.html", {
        "run": run, "summary": await _summary(db, settings, run_id), "sections": sections,
        "whatif_offer": offer, "max_points": MAX_POINTS})


def _compare_cards(left: dict, right: dict) -> list[dict]:
    """Pair run A's and B's charts by query: one overlaid chart where the kind allows it
    (lines over the same axes), otherwise the two side by side."""
    sections = []
    for section in RUN_SECTIONS:
        cards = []
        for name in sorted(set(left) | set(right)):
            a, b = left.get(name), right.get(name)
            if (a or b)["section"] != section:
                continue
            if a and b and a["chart"].get("kind") == "line":
                cards.append({"overlay": {**a, "el_id": f"chart-ab-{name}", "label": "A",
                                          "overlay": {**b, "label": "B"}}})
            else:
                cards.append({"pair": [
                    {**c, "el_id": f"chart-{side}-{name}", "title": f"{side.upper()}: {c['title']}"}
                    if c else {"missing": side.upper(), "name": name}
                    for side, c in (("a", a), ("b", b))]})
        if cards:
            sections.append({"name": section, "cards": cards})
    return sections


def _summary_table(sa: dict, sb: dict) -> list[dict]:
    rows = []
    for col, column in _summary_columns().items():
        va, vb = sa["row"].get(col), sb["row"].get(col)
        if col == "run_id" or (va is None and vb is None):
            continue
        rows.append({"col": col, "label": column.description.split(" Sentence:")[0].rstrip(". ") or col,
                     "a": fmt(column.fmt, va), "b": fmt(column.fmt, vb), "a_value": va, "b_value": vb})
    return rows


@router.get("/compare", response_class=HTMLResponse)
async def compare_page(request: Request, db: DbDep, settings: SettingsDep,
                       a: str | None = None, b: str | None = None):
    runs = await _runs(db, settings)
    by_id = {r["run_id"]: r for r in runs}
    ctx: dict[str, Any] = {"runs": runs, "a": by_id.get(a), "b": by_id.get(b), "sections": [],
                           "two_run": [], "summary": [], "charts": [],
                           "missing": [x for x in (a, b) if x and x not in by_id]}
    if ctx["a"] and ctx["b"]:
        ctx["summary"] = _summary_table(await _summary(db, settings, a),
                                        await _summary(db, settings, b))
        left = {c["name"]: c for s in await sections_for(db, settings, a) for c in s["charts"]}
        right = {c["name"]: c for s in await sections_for(db, settings, b) for c in s["charts"]}
        ctx["sections"] = _compare_cards(left, right)
        for q in compare_queries():
            params = dict(zip(_run_key(q), (a, b)))
            data = await chart_data(db, settings, q, params)
            if _has_data(data, q.chart or {}):
                ctx["two_run"].append({**chart_info(q, params), "data": data,
                                       "el_id": f"chart-{q.name}"})
        ctx["charts"] = ctx["two_run"] + [
            item for sec in ctx["sections"] for card in sec["cards"]
            for item in ([card["overlay"]] if "overlay" in card else card["pair"])
            if "missing" not in item]
    return templates.TemplateResponse(request, "compare.html", ctx)


@router.get("/queries", response_class=HTMLResponse)
def catalog_page(request: Request):
    groups: dict[str, list[dict]] = {s: [] for s in SECTIONS}
    for q in load_catalog().values():
        groups[q.section].append(q.as_dict())  # the catalog refuses any other section
    return templates.TemplateResponse(request, "queries.html",
                                      {"groups": [(s, qs) for s, qs in groups.items() if qs]})


@router.get("/queries/{name}", response_class=HTMLResponse)
async def query_page(request: Request, name: str, db: DbDep, settings: SettingsDep):
    query = load_catalog().get(name)
    if query is None:
        return _not_found(request, f"query {name!r}")
    params = {p.name: request.query_params.get(p.name, "") for p in query.params}
    ready = all(params[p.name] or not p.required for p in query.params)
    # The query page is the raw view: every row, nothing downsampled.
    asked = bool(request.query_params) or not query.params
    data = await chart_data(db, settings, query, params, EVERY_ROW) if ready and asked else None
    return templates.TemplateResponse(request, "query.html", {
        "query": query.as_dict(), "params": params, "runs": await _runs(db, settings),
        "run_params": _run_key(query), "data": data,
        "info": chart_info(query, params), "table_rows": 500})


@router.get("/ui/perfetto")
async def perfetto_json(db: DbDep, settings: SettingsDep, run_id: str, rank: int | None = None,
                        step: int | None = None) -> JSONResponse:
    """The timeline's window (one rank, one profiler step) as a Chrome-trace download, at most
    row_cap events, within the query timeout."""
    from polytrace.queries.perfetto import chrome_trace

    build = partial(chrome_trace, run_id=run_id, rank=rank, step=step, max_events=settings.row_cap)
    try:
        doc = await run_in_threadpool(db.read, build, settings.query_timeout_ms, "Perfetto export")
    except LookupError as e:
        return error_response(404, str(e))
    except QueryTimeout as e:
        return error_response(504, str(e))
    name = f"polytrace-{run_id}-rank{doc['otherData']['rank']}-step{doc['otherData']['step']}.json"
    return JSONResponse(doc, headers={"Content-Disposition": f'attachment; filename="{name}"'})


def mount(app: FastAPI) -> None:
    app.include_router(router)
    app.mount("/static", StaticFiles(directory=str(_frontend.joinpath("static"))), name="static")
