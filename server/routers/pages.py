"""Dashboard pages: Jinja2 templates over the same catalog and runner the REST API serves."""
from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from importlib import resources
from typing import Any
from urllib.parse import urlencode, urlsplit

from fastapi import APIRouter, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse
from fastapi.templating import Jinja2Templates

from polytrace.ingest.registry import FORMATS
from polytrace.queries.catalog import SECTIONS, Column, Query, load_catalog
from polytrace.queries.display import MAX_POINTS, steps_on_x
from polytrace.queries.render import HTTP_FORMATS, jsonable
from polytrace.queries.runner import QueryError, QueryTimeout
from polytrace.server.db import Database
from polytrace.server.deps import DbDep, SettingsDep
from polytrace.server.errors import ApiError, error_response, explained
from polytrace.server.headlines import difference, fmt, ratio, step_span
from polytrace.server.responses import CompressedStaticFiles, attachment
from polytrace.server.reads import (
    DISPLAY_PARAMS,
    chart_body,
    not_modified,
    run_findings,
    speaking,
    validators,
)

router = APIRouter(include_in_schema=False)
# The raw views (query page, headline numbers): as many points as `_points` allows.
EVERY_ROW = DISPLAY_PARAMS["_points"][2]
_frontend = resources.files("polytrace.frontend")
templates = Jinja2Templates(directory=str(_frontend.joinpath("templates")))

# The run page's chart sections, in the catalog's order: Runs and Findings are its headlines.
RUN_SECTIONS = tuple(s for s in SECTIONS if s not in ("Runs", "Findings"))
STEP_PARAMS = ("step_from", "step_to")
# Compare: kinds whose two runs share one set of axes (the rest sit side by side).
OVERLAID = ("line", "band", "hist")
# A caption is a query description's first sentence; the rest is behind "details".
_FIRST_SENTENCE = re.compile(r"^(.+?[.!?])\s+(?=[A-Z(`'\"])", re.S)
_TOKENS = re.compile(r"\btokens\b")


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


def caption(description: str) -> tuple[str, str]:
    """The one-line caption (the first sentence) and the full text when there is more."""
    m = _FIRST_SENTENCE.match(description or "")
    return (m.group(1), description) if m else (description or "", "")


def in_unit(text: str | None, length_unit: str) -> str | None:
    """An axis title for a run whose lengths are counted in `length_unit` ('tokens' or 'chars')."""
    return _TOKENS.sub(length_unit, text) if text and length_unit != "tokens" else text


def chart_info(query: Query, params: dict[str, Any], length_unit: str = "tokens") -> dict:
    """What the renderer needs besides rows: the spec, column docs and the REST URLs."""
    d = query.as_dict()
    spec = dict(query.chart or {"kind": "table"})
    for key in ("xlabel", "ylabel"):
        if spec.get(key):
            spec[key] = in_unit(spec[key], length_unit)
    columns = {c["name"]: {**c, "description": in_unit(c.get("description"), length_unit)}
               for c in d["columns"]}
    lead, doc = caption(query.description)
    return {
        "name": query.name, "title": spec.get("title") or query.title, "section": query.section,
        "caption": lead, "doc": doc, "chart": spec, "columns": columns,
        "params": {k: v for k, v in params.items() if v not in (None, "")},
        "rest": {f: rest_url(query.name, params, None if f == "json" else f)
                 for f in HTTP_FORMATS},
        "linked": steps_on_x(spec),
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


def _params(query: Query, run_id: str, window: dict[str, int | None]) -> dict[str, Any]:
    """A run chart's parameters: the run, and in the GPU section the chosen rank and profiler
    step where the query takes them (else its own defaults)."""
    if query.section != "GPU":
        return {"run_id": run_id}
    return {"run_id": run_id, **{p.name: window[p.name] for p in query.params if window.get(p.name) is not None}}


async def sections_for(db: Database, settings, run_id: str, window: dict[str, int | None] | None = None,
                       drawn: frozenset[str] = frozenset()) -> tuple[list[dict], str]:
    """The run page's sections in order, each with its charts that have data but those `drawn`
    already, and the run's length unit ('tokens' or 'chars', which words the axes). Every query
    that may have data (reads.speaking) runs at once. `window` ({"rank": ..., "step": ...}) is the
    GPU window the page shows."""
    asked = sorted((q for q in run_chart_queries() if q.name not in drawn), key=lambda q: q.name)
    queries = await speaking(db, settings, run_id, asked)
    params = [_params(q, run_id, window or {}) for q in queries]
    unit, *datas = await asyncio.gather(_length_unit(db, settings, run_id),
                                        *(chart_data(db, settings, q, p) for q, p in zip(queries, params)))
    out = []
    for section in RUN_SECTIONS:
        charts = [{**chart_info(q, p, unit), "data": data}
                  for q, p, data in zip(queries, params, datas) if q.section == section and _has_data(data, q.chart)]
        if charts:
            out.append({"name": section, "charts": charts})
    return out, unit


async def _catalog_rows(db: Database, settings, name: str, params: dict) -> dict | None:
    query = load_catalog().get(name)
    if query is None:
        return None
    data = await chart_data(db, settings, query, params, points=EVERY_ROW)
    return data if data.get("ok") else None


async def _gpu_windows(db: Database, settings, run_id: str) -> list[tuple[int, int]]:
    """The run's profiled steps as (rank, step), for the GPU window chooser."""
    data = await _catalog_rows(db, settings, "gpu_time", {"run_id": run_id, "include_last_step": True})
    if not data:
        return []
    rank, step = data["columns"].index("rank"), data["columns"].index("step")
    return sorted({(r[rank], r[step]) for r in data["rows"] if r[step] is not None})


async def _runs(db: Database, settings) -> list[dict]:
    data = await _catalog_rows(db, settings, "runs", {})
    return [dict(zip(data["columns"], r)) for r in data["rows"]] if data else []


def _length_unit_of(cur, run_id: str) -> str:
    has = cur.execute("SELECT count(*) FROM information_schema.columns "
                      "WHERE table_name = 'runs' AND column_name = 'length_unit'").fetchone()[0]
    if not has:
        return "tokens"  # a database from before runs.length_unit counted tokens
    row = cur.execute("SELECT length_unit FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return "chars" if row and row[0] == "chars" else "tokens"


async def _length_unit(db: Database, settings, run_id: str) -> str:
    """'chars' for a run whose samples' lengths are characters (runs.length_unit), else 'tokens'."""
    return await run_in_threadpool(db.read, partial(_length_unit_of, run_id=run_id),
                                   settings.query_timeout_ms, f"run {run_id!r}")


def _evidence(url: str | None) -> dict | None:
    """A finding's evidence (a REST URL of a catalog query) as the dashboard links it: the
    query's page over the same parameters, named by the query's title."""
    if not url:
        return None
    parts = urlsplit(url)
    name = parts.path.rsplit("/", 1)[-1]
    query = load_catalog().get(name) if parts.path.startswith("/api/queries/") else None
    if query is None:
        return {"href": url, "api": url, "title": url}
    return {"href": f"/queries/{name}" + (f"?{parts.query}" if parts.query else ""), "api": url,
            "title": query.title}


async def _findings(db: Database, settings, run_id: str) -> dict:
    """The run's findings, most severe first: the list GET /api/runs/{id}/findings answers, each
    with its evidence as a dashboard link and its steps in words."""
    try:
        found = await run_findings(db, settings, run_id)
    except ApiError as e:
        return {"items": [], "error": e.error}
    items = [{**f, "evidence_link": _evidence(f.get("evidence")),
              "span": step_span(f.get("steps"), bridge=True),
              "step_range": [min(f["steps"]), max(f["steps"])] if f.get("steps") else None}
             for f in found]
    return {"items": items, "error": None}


def _marks(findings: dict) -> list[dict]:
    """What the charts mark of each finding: its kind, severity and steps."""
    return [{k: f[k] for k in ("kind", "severity", "steps")} for f in findings["items"] if f.get("steps")]


def _not_found(request: Request, what: str) -> HTMLResponse:
    return templates.TemplateResponse(request, "missing.html", {"what": what}, status_code=404)


# ---- pages ---------------------------------------------------------------------------------

@router.get("/", response_class=HTMLResponse)
def runs_page(request: Request, settings: SettingsDep):
    """The runs overview and the uploader. The page carries the overview query's columns (their
    fmt and descriptions, in order); its rows come from GET /api/queries/runs_overview, polled."""
    query = load_catalog()["runs_overview"]
    return templates.TemplateResponse(request, "runs.html", {
        "needs_token": bool(settings.token),
        "formats": [{"name": f.name, "description": f.description} for f in FORMATS],
        "overview": {**chart_info(query, {}), "order": [c.name for c in query.columns]}})


async def _simulation_offer(db: Database, settings, run_id: str) -> str | None:
    """What POST /api/runs/{run_id}/whatif would start from (workload.whatif.offer), or None."""
    from polytrace.workload.whatif import offer

    return await run_in_threadpool(db.read, partial(offer, run_id=run_id),
                                   settings.query_timeout_ms, f"run {run_id!r}")


def _head_first(request: Request, rest: Callable[[], Awaitable[tuple[str, dict]]]) -> StreamingResponse:
    """A page whose preamble (its head but the title: styles and scripts) goes out at once, so that
    the browser fetches and runs the scripts while `rest` runs the page's queries; the rest of the
    page (template name and context) follows."""
    preamble = templates.get_template("_preamble.html").render(request=request)

    async def body() -> AsyncIterator[str]:
        yield preamble
        try:
            name, ctx = await rest()
        except Exception as e:  # the status went out with the preamble: the page says what failed
            name, ctx = "error.html", {"error": _page_error(request, e)}
        yield templates.get_template(name).render(request=request, **ctx).removeprefix(preamble)

    return StreamingResponse(body(), media_type="text/html; charset=utf-8")


def _page_error(request: Request, e: Exception) -> str:
    return str(e) if isinstance(e, QueryError) else explained(request, e).error


async def _run(db: Database, settings, run_id: str) -> dict | None:
    """The run's line of the runs query (its facts, steps and samples), or None."""
    return next((r for r in await _runs(db, settings) if r["run_id"] == run_id), None)


@router.get("/runs/{run_id}", response_class=HTMLResponse)
async def run_page(request: Request, run_id: str, db: DbDep, settings: SettingsDep,
                   rank: int | None = None, step: int | None = None):
    """A run's page; rank and step choose the GPU section's window (one rank's profiled step)."""
    run = await _run(db, settings, run_id)
    if run is None:
        return _not_found(request, f"run {run_id!r}")
    window = {"rank": rank, "step": step}

    async def rest() -> tuple[str, dict]:
        # its charts, its findings and its profiled steps at once
        (sections, unit), findings, windows = await asyncio.gather(
            sections_for(db, settings, run_id, window), _findings(db, settings, run_id),
            _gpu_windows(db, settings, run_id))
        # No stored simulation yet: offer one when the run can have it and the server may write.
        offer = (all(s["name"] != "What if" for s in sections) and db.lake is None
                 and await _simulation_offer(db, settings, run_id))
        return "run.html", {"run": run, "length_unit": unit, "findings": findings, "sections": sections,
                            "marks": {run_id: _marks(findings)}, "whatif_offer": offer,
                            "max_points": MAX_POINTS, "window": window,
                            "window_ranks": sorted({r for r, _ in windows}),
                            "window_steps": sorted({s for _, s in windows})}

    return _head_first(request, rest)


def _block(template: str, block: str, **ctx: Any) -> str:
    """One block of a page's template, rendered alone."""
    page = templates.get_template(template)
    return "".join(page.blocks[block](page.new_context(ctx)))


@router.get("/runs/{run_id}/live-parts")
async def run_live_parts(request: Request, run_id: str, db: DbDep, settings: SettingsDep, drawn: str = ""):
    """What of a run page follows the run while it trains (static/live.js swaps it in), rendered
    as the page renders it: the header's facts, the findings list and what the charts mark of
    them, and the charts the page would draw now but those it has drawn (`drawn`: their names,
    comma-separated). 304 while the run is unchanged."""
    shown = frozenset(drawn.split(",")) - {""}
    etag = db.etag([run_id], variant=hashlib.sha256(",".join(sorted(shown)).encode()).hexdigest()[:12])
    if unchanged := not_modified(request, etag):
        return unchanged
    run = await _run(db, settings, run_id)
    if run is None:
        return error_response(404, f"unknown run {run_id!r}")
    (sections, unit), findings = await asyncio.gather(sections_for(db, settings, run_id, drawn=shown),
                                                      _findings(db, settings, run_id))
    fx = templates.get_template("_findings.html").module
    return JSONResponse({
        "facts": _block("run.html", "run_facts", run=run, length_unit=unit),
        "findings": str(fx.findings_list(findings)),
        "marks": {run_id: _marks(findings)},
        "charts": [{"name": c["name"], "title": c["title"]} for s in sections for c in s["charts"]],
    }, headers=validators(etag))


def _compare_cards(left: dict, right: dict) -> list[dict]:
    """Pair run A's and B's charts by query: one chart over both runs where the kind allows it
    (lines and quantile bands over the same axes, histograms as shares), otherwise the two
    side by side."""
    sections = []
    for section in RUN_SECTIONS:
        cards = []
        for name in sorted(set(left) | set(right)):
            a, b = left.get(name), right.get(name)
            if (a or b)["section"] != section:
                continue
            if a and b and a["chart"].get("kind") in OVERLAID:
                cards.append({"overlay": {**a, "el_id": f"chart-ab-{name}", "label": "A",
                                          "overlay": {**b, "label": "B"}}})
            else:
                cards.append({"pair": [
                    {**c, "el_id": f"chart-{side}-{name}", "title": f"{side.upper()}: {c['title']}"}
                    if c else {"missing": side.upper(), "name": name, "title": (a or b)["title"]}
                    for side, c in (("a", a), ("b", b))]})
        if cards:
            sections.append({"name": section, "cards": cards})
    return sections


async def _summary(db: Database, settings, run_id: str) -> dict:
    """run_summary's one row for a run, by column name (empty without one)."""
    data = await _catalog_rows(db, settings, "run_summary", {"run_id": run_id})
    return dict(zip(data["columns"], data["rows"][0])) if data and data["rows"] else {}


def _summary_columns() -> dict[str, Column]:
    """run_summary's columns (descriptions, fmt) by name; empty if a site's catalog lacks the query."""
    query = load_catalog().get("run_summary")
    return {c.name: c for c in query.columns} if query else {}


def _label(description: str | None, name: str) -> str:
    """A run_summary column as a row label, in the words of the catalog: the clause of the
    column's 'Sentence:' template that holds it, with "…" for the number ("Rollout generation
    took … of step time"); else its description before any template."""
    text, _, template = (description or "").partition("Sentence:")
    for clause in re.split(r"[,;:.]\s+|\.$", re.sub(r"\s*\([^()]*\)", "", template.strip())):
        if f"{{{name}}}" in clause:
            clause = clause.replace(f"{{{name}}}", "…").split("{")[0]
            return re.sub(r"\s+(?:in|at|on)\s+(?:step|rank)\s*$", "", clause.strip())
    return text.split("; ")[0].strip().rstrip(".") or name.replace("_", " ")


def summary_table(row_a: dict, row_b: dict) -> list[dict]:
    """Both runs' run_summary numbers by the columns' fmt, with B against A in words. Steps and
    ranks named by a number (worst_idle_step, straggler_rank) get no difference."""
    rows = []
    for col, column in _summary_columns().items():
        va, vb = row_a.get(col), row_b.get(col)
        if col == "run_id" or (va is None and vb is None):
            continue
        compared = column.fmt is not None and not col.endswith(("_step", "_rank"))
        rows.append({"col": col, "label": _label(column.description, col), "doc": column.description,
                     "a": fmt(column.fmt, va), "b": fmt(column.fmt, vb), "a_value": va, "b_value": vb,
                     "delta": difference(column.fmt, va, vb) if compared else "",
                     "ratio": ratio(va, vb) if compared else ""})
    return rows


@router.get("/compare", response_class=HTMLResponse)
async def compare_page(request: Request, db: DbDep, settings: SettingsDep,
                       a: str | None = None, b: str | None = None, fidelity: bool = False):
    runs = await _runs(db, settings)
    by_id = {r["run_id"]: r for r in runs}
    ctx: dict[str, Any] = {"runs": runs, "a": by_id.get(a), "b": by_id.get(b), "sections": [],
                           "two_run": [], "summary": [], "charts": [], "findings": {}, "marks": {},
                           "fidelity": fidelity, "fidelity_offer": False,
                           "missing": [x for x in (a, b) if x and x not in by_id]}
    if not (ctx["a"] and ctx["b"]):
        return templates.TemplateResponse(request, "compare.html", ctx)
    return _head_first(request, partial(_two_runs, request, db, settings, a, b, fidelity, ctx))


async def _two_runs(request: Request, db: Database, settings, a: str, b: str, fidelity: bool,
                    ctx: dict[str, Any]) -> tuple[str, dict]:
    """The compare page of two known runs: both runs' numbers, findings and charts, all at once."""
    # Queries over two runs (the replay fidelity) read A as the replay of B: only on request.
    two_run = [(q, dict(zip(_run_key(q), (a, b)))) for q in (compare_queries() if fidelity else [])]
    summary_a, summary_b, found_a, found_b, (left, _), (right, _), *two_run_data = await asyncio.gather(
        _summary(db, settings, a), _summary(db, settings, b),
        _findings(db, settings, a), _findings(db, settings, b),
        sections_for(db, settings, a), sections_for(db, settings, b),
        *(chart_data(db, settings, q, params) for q, params in two_run))
    ctx["summary"] = summary_table(summary_a, summary_b)
    ctx["findings"] = {"a": found_a, "b": found_b}
    ctx["marks"] = {a: _marks(found_a), b: _marks(found_b)}
    ctx["sections"] = _compare_cards({c["name"]: c for s in left for c in s["charts"]},
                                     {c["name"]: c for s in right for c in s["charts"]})
    ctx["fidelity_offer"] = bool(compare_queries()) and not fidelity
    for (q, params), data in zip(two_run, two_run_data):
        if _has_data(data, q.chart or {}):
            ctx["two_run"].append({**chart_info(q, params), "data": data,
                                   "el_id": f"chart-{q.name}", "roles": _run_key(q)})
    ctx["charts"] = ctx["two_run"] + [
        item for sec in ctx["sections"] for card in sec["cards"]
        for item in ([card["overlay"]] if "overlay" in card else card["pair"])
        if "missing" not in item]
    return "compare.html", ctx


@router.get("/queries", response_class=HTMLResponse)
def catalog_page(request: Request):
    groups: dict[str, list[dict]] = {s: [] for s in SECTIONS}
    for q in load_catalog().values():
        groups[q.section].append(q.as_dict())  # the catalog refuses any other section
    return templates.TemplateResponse(request, "queries.html",
                                      {"groups": [(s, qs) for s, qs in groups.items() if qs]})


def table_cell(value: Any, column: str, kind: str | None) -> dict:
    """A table cell as the dashboard shows it: by the column's fmt, 'all' for the step of a
    whole-trace row; long text is cut on the page with the whole of it on hover."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if value is None:
        text = "all" if column == "step" else ""
    else:
        text = fmt(kind, value) if kind and number else str(value)
    return {"text": text, "n": number or text == "all", "full": text if len(text) > 48 else None}


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
    kinds = {c.name: c.fmt for c in query.columns}
    cells = [[table_cell(v, c, kinds.get(c)) for c, v in zip(data["columns"], r)]
             for r in data["rows"][:500]] if data and data.get("ok") else []
    return templates.TemplateResponse(request, "query.html", {
        "query": query.as_dict(), "params": params, "runs": await _runs(db, settings),
        "run_params": _run_key(query), "data": data, "cells": cells,
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
    return JSONResponse(doc, headers=attachment(name))


def mount(app: FastAPI) -> None:
    app.include_router(router)
    # The vendored plotly bundle changes only with a new release of it: browsers keep it a day.
    # The dashboard's own files are revalidated (their ETag) on every use.
    app.mount("/static", CompressedStaticFiles(directory=str(_frontend.joinpath("static")),
                                               cache_control={"plotly.min.js": "public, max-age=86400"}),
              name="static")
