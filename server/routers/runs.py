"""REST: the server's health, the runs, one run's detail and findings, and deleting a run."""
from __future__ import annotations

import json
from functools import partial
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel

from polytrace import service
from polytrace.queries.catalog import get_query
from polytrace.server.deps import DbDep, RunIdPath, SettingsDep, WriterDep
from polytrace.server.errors import ApiError, error_responses
from polytrace.server.reads import not_modified, run_findings, run_for_request, validators
from polytrace.server.responses import Json
from polytrace.store.runs import row_counts

class Health(BaseModel):
    ok: bool = True
    version: str
    writes_need_token: bool
    reads_need_token: bool = False
    stale: str | None = None  # why some runs' stored answers are stale (a refresh at start-up failed)


class RunList(BaseModel):
    ok: bool = True
    runs: list[dict[str, Any]]


class RunDetail(BaseModel):
    ok: bool = True
    run: dict[str, Any]
    ingests: list[dict[str, Any]]
    rows: dict[str, int]


class Findings(BaseModel):
    ok: bool = True
    findings: list[dict[str, Any]]  # kind, severity, value, unit, steps, stage, text, evidence


class Deleted(BaseModel):
    ok: bool = True
    run_id: str



def router() -> APIRouter:
    routes = APIRouter(prefix="/api", tags=["api"], default_response_class=Json)
    routes.add_api_route("/health", health, methods=["GET"], operation_id="health",
                         response_model=Health, summary="Is the server up")
    routes.add_api_route("/runs", list_runs, methods=["GET"], operation_id="list_runs",
                         response_model=RunList, summary="Every ingested run")
    routes.add_api_route("/runs/{run_id}", get_run, methods=["GET"], operation_id="get_run",
                         response_model=RunDetail, responses=error_responses(404, 422),
                         summary="One run, its ingests and row counts")
    routes.add_api_route("/runs/{run_id}/findings", get_findings, methods=["GET"],
                         operation_id="get_findings", response_model=Findings,
                         responses=error_responses(404, 504),
                         summary="What the run's numbers say: one sentence each, with the query that proves it")
    routes.add_api_route("/runs/{run_id}", remove_run, methods=["DELETE"], operation_id="delete_run",
                         dependencies=[WriterDep], response_model=Deleted,
                         responses=error_responses(401, 403, 404, 422, 507),
                         summary="Delete a run and all its rows, its ingest log included")
    return routes


async def health(request: Request, settings: SettingsDep) -> dict:
    return {"ok": True, "version": request.app.version, "writes_need_token": settings.token is not None,
            "reads_need_token": settings.reads_need_token,
            "stale": request.app.state.stale}


async def list_runs(request: Request, response: Response, db: DbDep, settings: SettingsDep) -> Any:
    etag = db.etag()
    if unchanged := not_modified(request, etag):
        return unchanged
    answer = await run_for_request(db, settings, get_query("runs"), {})
    response.headers.update(validators(etag))
    return {"ok": True, "runs": [dict(zip(answer.columns, r)) for r in answer.rows]}


def _records(res) -> list[dict[str, Any]]:
    names = [d[0] for d in res.description]
    return [dict(zip(names, r)) for r in res.fetchall()]


def _run_detail(run_id: str, cur) -> dict | None:
    runs = _records(cur.execute("SELECT * FROM runs WHERE run_id = ?", [run_id]))
    if not runs:
        return None
    run = runs[0]
    if isinstance(run.get("config"), str):
        try:
            run["config"] = json.loads(run["config"])
        except ValueError:
            pass
    ingests = _records(cur.execute(
        "SELECT * FROM ingests WHERE run_id = ? ORDER BY started_at, file_name", [run_id]))
    # the same counts an upload answers with: canonical tables with rows for this run
    return {"ok": True, "run": run, "ingests": ingests, "rows": row_counts(cur, run_id)}


async def get_run(run_id: RunIdPath, request: Request, response: Response, db: DbDep,
                  settings: SettingsDep) -> Any:
    etag = db.etag([run_id])
    if unchanged := not_modified(request, etag):
        return unchanged
    detail = await run_in_threadpool(db.read, partial(_run_detail, run_id), settings.query_timeout_ms,
                                     f"run {run_id!r}")
    if detail is None:
        raise ApiError(404, f"unknown run {run_id!r}")
    response.headers.update(validators(etag))
    return detail


async def get_findings(run_id: str, request: Request, db: DbDep, settings: SettingsDep) -> Any:
    etag = db.etag([run_id])
    if unchanged := not_modified(request, etag):
        return unchanged
    found = await run_findings(db, settings, run_id)
    # a Response of its own: FastAPI would check the body against the Findings model first
    return Json({"ok": True, "findings": found}, headers=validators(etag))


async def remove_run(run_id: RunIdPath, db: DbDep) -> dict:
    if not await run_in_threadpool(db.write, partial(service.delete_run, run_id=run_id)):
        raise ApiError(404, f"unknown run {run_id!r}")
    return {"ok": True, "run_id": run_id}

