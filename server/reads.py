"""The reads REST and the pages share: conditional GETs, a catalog query run for a request (its
JSON body shaped for a chart) and a run's findings. No router imports another: they import this."""
from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

from fastapi import Request, Response
from fastapi.concurrency import run_in_threadpool

from polytrace.queries import display, overview, render
from polytrace.queries.catalog import ParamError, Query, bind
from polytrace.queries.findings import collect, finding_queries, stored
from polytrace.queries.runner import Answer, BadValue, Limits, OutOfMemory, QueryTimeout
from polytrace.server.db import Database
from polytrace.server.errors import ApiError
from polytrace.settings import Settings
from polytrace.store.runs import exists

# Display parameters (Datasette's `_` style): shape the JSON rows for a chart, never the query.
DISPLAY_PARAMS = {
    "_points": ("At most this many x values (steps): longer series are bucketed, each point "
                "the mean of consecutive steps; adds `downsampled` and `x_bounds` to the body.",
                10, 100_000),
    "_x_from": ("Keep rows whose chart x (the step) is at least this.", None, None),
    "_x_to": ("Keep rows whose chart x (the step) is at most this.", None, None),
    "_since": ("Answer only the rows from this step on, computed over those steps alone (a step chart's "
               "new steps, for a page that holds the rows before); `x_bounds` are theirs.", -2**62, 2**62),
    "_width": ("With `_since`: bucket the rows this many steps a bucket from `_since` on (a page's "
               "buckets, when `_since` starts one); the note counts the steps of the last bucket.",
               1, 1_000_000_000),
}



# --- conditional GETs: a poller asks with If-None-Match and gets 304 until a write changes the answer

def validators(etag: str) -> dict[str, str]:
    """An answer's ETag, and that a cache must ask again (If-None-Match) before using it."""
    return {"ETag": etag, "Cache-Control": "no-cache"}


def not_modified(request: Request, etag: str) -> Response | None:
    """304 when If-None-Match names the answer's current ETag (compared weakly, as for GET)."""
    sent = request.headers.get("if-none-match")
    if not sent:
        return None
    bare = etag.removeprefix("W/")
    if any(t.strip() == "*" or t.strip().removeprefix("W/") == bare for t in sent.split(",")):
        return Response(status_code=304, headers=validators(etag))
    return None



# --- a catalog query for a request ------------------------------------------------------------

def limits(settings: Settings) -> Limits:
    return Limits(timeout_ms=settings.query_timeout_ms, row_cap=settings.row_cap)


async def run_for_request(db: Database, settings: Settings, query: Query, bound: dict) -> Answer:
    """Run a bound catalog query off the event loop; timeouts and rejected values become ApiError."""
    try:
        return await run_in_threadpool(db.query, query, bound, limits(settings))
    except QueryTimeout as e:
        raise ApiError(504, str(e)) from None
    except BadValue as e:
        raise ApiError(422, str(e)) from None
    except OutOfMemory as e:
        raise ApiError(507, f"{e} (the server's POLYTRACE_MEMORY_LIMIT is {settings.memory_limit:,} bytes)") from None


def _display(params: dict[str, str]) -> dict[str, int | None]:
    shown = {}
    for name, (_, lo, hi) in DISPLAY_PARAMS.items():
        raw = params.get(name)
        try:
            value = None if raw in (None, "") else int(raw)
        except ValueError:
            raise ApiError(422, f"parameter {name!r} must be an integer, got {raw!r}") from None
        if value is not None and ((lo is not None and value < lo) or (hi is not None and value > hi)):
            raise ApiError(422, f"parameter {name!r} must be between {lo} and {hi}, got {value}")
        shown[name] = value
    if shown["_x_from"] is not None and shown["_x_to"] is not None and shown["_x_from"] > shown["_x_to"]:
        raise ApiError(422, f"the step window is reversed: _x_from {shown['_x_from']} is after "
                            f"_x_to {shown['_x_to']}")
    if shown["_width"] is not None and shown["_since"] is None:
        raise ApiError(422, "parameter '_width' buckets the rows from '_since': give '_since' too")
    return shown


async def query_result(db: Database, settings: Settings, query: Query, params: dict[str, Any]) -> Answer:
    """The query's answer to the request's parameters (display parameters left out): 422 for a bad
    parameter, 404 for an empty answer about an unknown run."""
    try:
        bound = bind(query, {k: v for k, v in params.items() if k not in DISPLAY_PARAMS})
    except ParamError as e:
        raise ApiError(422, str(e)) from None
    result = await run_for_request(db, settings, query, bound)
    await runs_known(db, settings, query, params, result)
    return result


async def chart_body(db: Database, settings: Settings, query: Query, params: dict[str, Any]) -> dict:
    """The JSON body of a query: its rows as the REST API answers them, shaped by any display
    parameters in `params` (the pages draw exactly this)."""
    shown = _display(params)
    if shown["_since"] is not None:
        if not display.steps_on_x(query.chart):
            raise ApiError(422, f"{query.name}: its chart's x is not the training step: '_since' takes "
                                "the rows of a step series from a step on")
        query = display.since(query, shown["_since"])
    body = render.json_body(await query_result(db, settings, query, params))
    if any(v is not None for v in shown.values()):
        try:
            body.update(display.for_chart(body["columns"], [list(r) for r in body["rows"]], query.chart,
                                          shown["_points"], shown["_x_from"], shown["_x_to"],
                                          shown["_since"], shown["_width"]))
        except display.WindowError as e:
            raise ApiError(422, f"{query.name}: {e}") from None
    return body


async def runs_known(db: Database, settings: Settings, query: Query, params: dict[str, Any],
                      result: Answer) -> None:
    """An empty answer about a run that is not here is a 404, not an empty 200 (a mistyped id read
    as a run with no data). Only an empty answer is checked: the others cost nothing more."""
    runs = read_runs(query, params) if not result.table.num_rows else None
    if not runs:
        return
    missing = await run_in_threadpool(db.read, lambda cur: [r for r in runs if not exists(cur, r)],
                                      settings.query_timeout_ms, "the runs asked for")
    if missing:
        raise ApiError(404, f"unknown run {missing[0]!r}")


def read_runs(query: Query, params: dict[str, str]) -> list[str] | None:
    """The runs a query's answer reads (its run_id or *_run parameters); None: it may read any."""
    names = [p.name for p in query.params if p.name == "run_id" or p.name.endswith("_run")]
    runs = [params.get(n) for n in names]
    return runs if names and all(runs) else None



# --- a run's findings -------------------------------------------------------------------------

def _known_and_kept(con, run_id: str) -> tuple[bool, list[dict[str, Any]] | None]:
    """Whether the run exists, and its findings as its last write kept them (None: not all kept).
    Kept findings say that the run exists (deleting a run deletes its answers in the same
    transaction): only a run without them is looked up again."""
    kept = stored(con, run_id)
    return (True, kept) if kept is not None else (exists(con, run_id), None)


async def speaking(db: Database, settings: Settings, run_id: str, queries: list[Query]) -> list[Query]:
    """Those of `queries` that may have something to say of the run: all but the silent ones (none of
    whose inputs holds a row of it: queries/overview.silent, which answer no row), found in one
    look at the inputs; all of them over a lake, or when that look runs out of time."""
    if db.lake is not None:
        return queries
    try:
        held = await run_in_threadpool(db.read, partial(overview.holding, run_id=run_id, queries=queries,
                                                        limits=limits(settings)),
                                       settings.query_timeout_ms, f"the inputs of run {run_id!r}")
    except QueryTimeout:
        return queries
    return [q for q in queries if not overview.silent(q, held)]


async def computed_findings(db: Database, settings: Settings, run_id: str) -> list[dict[str, Any]]:
    """The Findings-section queries of the catalog that may find something, run side by side, as
    one list."""
    queries = await speaking(db, settings, run_id, finding_queries())
    return collect(await asyncio.gather(*(run_for_request(db, settings, q, bind(q, {"run_id": run_id}))
                                          for q in queries)))


async def run_findings(db: Database, settings: Settings, run_id: str) -> list[dict[str, Any]]:
    """The run's findings: from the answers its last write kept when they are all there (an append
    deletes them until the run is summed up again), else computed; ApiError 404 for an unknown run."""
    known, kept = await run_in_threadpool(db.read, partial(_known_and_kept, run_id=run_id),
                                          settings.query_timeout_ms, f"findings of run {run_id!r}",
                                          snapshot=False)
    if not known:
        raise ApiError(404, f"unknown run {run_id!r}")
    return kept if kept is not None else await computed_findings(db, settings, run_id)

