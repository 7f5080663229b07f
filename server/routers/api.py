"""REST API: runs, uploads and the query catalog, all answering in one error shape."""
from __future__ import annotations

import asyncio
import inspect
import json
from functools import partial
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal

import anyio
from fastapi import APIRouter, Request, Response
from fastapi import Path as PathParam
from fastapi import Query as QueryParam
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel
from starlette.routing import BaseRoute

from polytrace.ingest import live, registry
from polytrace.ingest.contract import IngestError
from polytrace.ingest.load import DiskFull, IngestResult, RunConflict, ingest_paths
from polytrace.ingest.parsing import now
from polytrace.ingest.run_facts import GIVEN_RUN_FACTS
from polytrace.queries import display, overview, render
from polytrace.queries.catalog import INT_RANGE, ParamError, Query, bind, get_query, load_catalog
from polytrace.queries.findings import collect, finding_queries, stored
from polytrace.queries.runner import Answer, BadValue, Limits, QueryTimeout
from polytrace.server import watch
from polytrace.server.db import Database
from polytrace.server.deps import DbDep, SettingsDep, WriterDep
from polytrace.server.errors import ApiError, ErrorBody
from polytrace.server.responses import (
    MEDIA_TYPES,
    Json,
    csv_result,
    negotiate,
    parquet_result,
)
from polytrace.server.uploads import FILE_FIELD, Upload, receive
from polytrace.settings import Settings
from polytrace.store.runs import RUN_ID, delete_run, exists, row_counts

FormatParam = Annotated[
    Literal["json", "csv", "parquet"] | None,
    QueryParam(description="Answer as json (default), csv or parquet; overrides the Accept header."),
]
_PY_TYPES = {"INTEGER": int, "BIGINT": int, "DOUBLE": float, "BOOLEAN": bool}
RunIdPath = Annotated[str, PathParam(pattern=RUN_ID.pattern, description="A run id, as /api/runs lists it.")]
# Display parameters (Datasette's `_` style): shape the JSON rows for a chart, never the query.
DISPLAY_PARAMS = {
    "_points": ("At most this many x values (steps): longer series are bucketed, each point "
                "the mean of consecutive steps; adds `downsampled` and `x_bounds` to the body.",
                10, 100_000),
    "_x_from": ("Keep rows whose chart x (the step) is at least this.", None, None),
    "_x_to": ("Keep rows whose chart x (the step) is at most this.", None, None),
}


def _errors(*statuses: int) -> dict:
    return {s: {"model": ErrorBody} for s in statuses}


class Health(BaseModel):
    ok: bool = True
    version: str
    writes_need_token: bool


class RunList(BaseModel):
    ok: bool = True
    runs: list[dict[str, Any]]


class RunDetail(BaseModel):
    ok: bool = True
    run: dict[str, Any]
    ingests: list[dict[str, Any]]
    rows: dict[str, int]


class Uploaded(BaseModel):
    ok: bool = True
    run_id: str
    run_ids: list[str]  # several only when the upload is a Parquet lake of several runs
    format: str
    rows: dict[str, int]
    existing: bool
    warnings: list[str]


class Findings(BaseModel):
    ok: bool = True
    findings: list[dict[str, Any]]  # kind, severity, value, unit, steps, stage, text, evidence


class Deleted(BaseModel):
    ok: bool = True
    run_id: str


class Simulated(BaseModel):
    ok: bool = True
    run_id: str
    rows: int  # whatif rows stored: per engine and per step, for every policy
    policies: list[str]
    calibration: str


class LiveStatus(BaseModel):
    ok: bool = True
    run_id: str
    live: bool             # followed by this server, or an append within the last LIVE_WINDOW_S
    followed: bool         # a directory this server follows (serve --watch)
    source: str | None     # the followed directory, as its follower names it
    last_step: int | None
    last_step_at: Any      # when the last step landed (UTC)
    last_append_at: Any
    files: dict[str, dict[str, Any]]  # file -> committed, format, identity, mtime, steps, note


class AppendedBody(BaseModel):
    ok: bool = True
    run_id: str
    file: str
    committed: int         # the file's bytes the run holds now: send the next append from here
    steps: list[int]       # steps this append brought or changed
    rows: int
    notes: list[str]


class Catalog(BaseModel):
    ok: bool = True
    queries: list[dict[str, Any]]


class QueryResult(BaseModel):
    ok: bool = True
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool


def build_router() -> APIRouter:
    """The /api routes; query_operations documents each catalog query."""
    router = APIRouter(prefix="/api", tags=["api"], default_response_class=Json)
    # the catalog first: FastAPI tries the routes in turn, and most requests are a chart's query
    router.add_api_route("/queries/{name}", run_query, methods=["GET"], operation_id="run_query",
                         response_model=QueryResult, responses=_query_responses(),
                         summary="Run any catalog query by name")
    router.add_api_route("/queries", list_queries, methods=["GET"], operation_id="list_queries",
                         response_model=Catalog, summary="The query catalog")
    router.add_api_route("/health", health, methods=["GET"], operation_id="health",
                         response_model=Health, summary="Is the server up")
    router.add_api_route("/runs", list_runs, methods=["GET"], operation_id="list_runs",
                         response_model=RunList, summary="Every ingested run")
    router.add_api_route("/runs", upload_run, methods=["POST"], operation_id="upload_run",
                         status_code=201, dependencies=[WriterDep], response_model=Uploaded,
                         summary="Upload trace files as one run", openapi_extra=_upload_body(),
                         responses={200: {"model": Uploaded, "description": "Already ingested"},
                                    **_errors(400, 401, 403, 408, 409, 413, 415, 422, 507)})
    router.add_api_route("/runs/{run_id}", get_run, methods=["GET"], operation_id="get_run",
                         response_model=RunDetail, responses=_errors(404, 422),
                         summary="One run, its ingests and row counts")
    router.add_api_route("/runs/{run_id}/findings", get_findings, methods=["GET"],
                         operation_id="get_findings", response_model=Findings, responses=_errors(404, 504),
                         summary="What the run's numbers say: one sentence each, with the query that proves it")
    router.add_api_route("/runs/{run_id}", remove_run, methods=["DELETE"], operation_id="delete_run",
                         dependencies=[WriterDep], response_model=Deleted,
                         responses=_errors(401, 403, 404, 422, 507),
                         summary="Delete a run and all its rows, its ingest log included")
    router.add_api_route("/runs/{run_id}/live", live_status, methods=["GET"], operation_id="live_status",
                         response_model=LiveStatus, responses=_errors(404, 422),
                         summary="A live run: when its last step landed, and each followed file's committed offset")
    router.add_api_route("/runs/{run_id}/append", append_run, methods=["POST"], operation_id="append_run",
                         dependencies=[WriterDep], response_model=AppendedBody, openapi_extra=_append_body(),
                         responses={**_errors(400, 401, 403, 408, 413, 415, 422, 507),
                                    409: {"description": "A gap: resend from `offset`",
                                          "content": {"application/json": {}}}},
                         summary="Append a followed file's new bytes to a live run (a training job's callback)")
    router.add_api_route("/runs/{run_id}/whatif", simulate_run, methods=["POST"],
                         operation_id="simulate_run", dependencies=[WriterDep],
                         response_model=Simulated, responses=_errors(401, 404, 409),
                         summary="Simulate the run under every dispatch policy (the What if section)")
    return router


def query_operations() -> list[BaseRoute]:
    """One documented operation per catalog query, as it is now, for the OpenAPI schema only:
    `/queries/{name}` serves them all, so that a request matches one route, not one per query
    (FastAPI tried every route's pattern in turn, twice, a third of a light request's CPU)."""
    documented = APIRouter(prefix="/api", tags=["api"], default_response_class=Json)
    for query in load_catalog().values():
        documented.add_api_route(
            f"/queries/{query.name}", _query_endpoint(query), methods=["GET"],
            operation_id=f"query_{query.name}", summary=query.title, description=query.description,
            response_model=QueryResult, responses=_query_responses())
    return documented.routes


async def health(request: Request, settings: SettingsDep) -> dict:
    return {"ok": True, "version": request.app.version, "writes_need_token": settings.token is not None}


# --- runs -------------------------------------------------------------------------------------

async def list_runs(request: Request, response: Response, db: DbDep, settings: SettingsDep) -> Any:
    etag = db.etag()
    if unchanged := not_modified(request, etag):
        return unchanged
    answer = await run_bound(db, settings, get_query("runs"), {})
    response.headers.update(validators(etag))
    return {"ok": True, "runs": [dict(zip(answer.columns, r)) for r in answer.rows]}


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


def _known_and_kept(con, run_id: str) -> tuple[bool, list[dict[str, Any]] | None]:
    """Whether the run exists, and its findings as its last write kept them (None: not all kept).
    Kept findings say that the run exists (deleting a run deletes its answers in the same
    transaction): only a run without them is looked up again."""
    kept = stored(con, run_id)
    return (True, kept) if kept is not None else (exists(con, run_id), None)


async def computed_findings(db: Database, settings: Settings, run_id: str) -> list[dict[str, Any]]:
    """The Findings-section queries of the catalog, run side by side, as one list."""
    answers = await asyncio.gather(*(run_bound(db, settings, q, bind(q, {"run_id": run_id}))
                                     for q in finding_queries()))
    return collect(answers)


async def run_findings(db: Database, settings: Settings, run_id: str) -> list[dict[str, Any]]:
    """The run's findings: from the answers its last write kept when they are all there (an append
    deletes them until the run is summed up again), else computed; ApiError 404 for an unknown run."""
    known, kept = await run_in_threadpool(db.read, partial(_known_and_kept, run_id=run_id),
                                          settings.query_timeout_ms, f"findings of run {run_id!r}",
                                          snapshot=False)
    if not known:
        raise ApiError(404, f"unknown run {run_id!r}")
    return kept if kept is not None else await computed_findings(db, settings, run_id)


async def get_findings(run_id: str, request: Request, db: DbDep, settings: SettingsDep) -> Any:
    etag = db.etag([run_id])
    if unchanged := not_modified(request, etag):
        return unchanged
    found = await run_findings(db, settings, run_id)
    # a Response of its own: FastAPI would check the body against the Findings model first
    return Json({"ok": True, "findings": found}, headers=validators(etag))


# --- live runs ------------------------------------------------------------------------------------

# A run that got an append this recently is live, even when no directory of this server feeds it.
LIVE_WINDOW_S = 300
# One append's bytes are held in memory: a log is sent in chunks, a step file or trace whole.
APPEND_MAX_BYTES = 256 << 20


def _utc(value) -> str | None:
    return None if value is None else value.isoformat() + "Z"


def _live_status(run_id: str, followed: bool, cur) -> dict | None:
    if not exists(cur, run_id):
        return None
    row = cur.execute("SELECT source, last_step, last_step_at, last_append_at FROM live_runs WHERE live_run = ?",
                      [run_id]).fetchall()
    source, last_step, step_at, append_at = row[0] if row else (None, None, None, None)
    recent = append_at is not None and (now() - append_at).total_seconds() < LIVE_WINDOW_S
    return {"ok": True, "run_id": run_id, "live": bool(row) and (followed or recent), "followed": followed,
            "source": source, "last_step": last_step, "last_step_at": _utc(step_at),
            "last_append_at": _utc(append_at),
            "files": {name: f.as_dict() for name, f in live.file_states(cur, run_id).items()}}


async def live_status(run_id: RunIdPath, request: Request, response: Response, db: DbDep,
                      settings: SettingsDep) -> Any:
    """Polled by the run page (and a pusher resuming): answers 304 while nothing changed."""
    etag = db.etag([run_id])
    if unchanged := not_modified(request, etag):
        return unchanged
    watching = getattr(request.app.state, "watching", None)
    followed = watching is not None and run_id in watching.runs
    status = await run_in_threadpool(db.read, partial(_live_status, run_id, followed),
                                     settings.query_timeout_ms, f"run {run_id!r}")
    if status is None:
        raise ApiError(404, f"unknown run {run_id!r}")
    response.headers.update(validators(etag))
    return status


def _append_body() -> dict:
    return {"requestBody": {"required": True, "content": {"application/octet-stream": {
        "schema": {"type": "string", "format": "binary"},
        "example": "step:3 - timing_s/step:41.2 - ...\n"}},
        "description": "The file's bytes from `offset`: a log's new bytes (only whole lines are taken), "
                       "or a whole step file or trace (offset 0, complete=true)."}}


async def _append_bytes(request: Request, timeout_s: float) -> bytes:
    declared = request.headers.get("content-length")
    too_big = ApiError(413, f"an append carries at most {APPEND_MAX_BYTES} bytes: send a log in chunks")
    if declared and declared.isdigit() and int(declared) > APPEND_MAX_BYTES:
        raise too_big
    data = bytearray()
    try:
        with anyio.fail_after(timeout_s):
            async for part in request.stream():
                data += part
                if len(data) > APPEND_MAX_BYTES:
                    raise too_big
    except TimeoutError:
        raise ApiError(408, f"the append's body did not arrive within {timeout_s:g} s "
                            "(POLYTRACE_UPLOAD_TIMEOUT_S)") from None
    return bytes(data)


def _followed_name(name: str) -> str:
    """A followed file's path below its directory: relative, nowhere above it, each part a file name."""
    parts = PurePosixPath(name).parts
    if (not parts or name.startswith("/") or ".." in parts or "\\" in name or not name.isprintable()
            or any(len(part.encode()) > 255 for part in parts)):
        raise ApiError(422, f"parameter 'file': {name[:80]!r} is not a relative path below the followed directory")
    return name


def _printable(value: str | None, field: str) -> str | None:
    if value is not None and not value.isprintable():
        raise ApiError(422, f"parameter {field!r} must be printable text")
    return value


async def append_run(
    run_id: RunIdPath, request: Request, db: DbDep, settings: SettingsDep,
    file: Annotated[str, QueryParam(min_length=1, max_length=1000,
                                    description="The file's path below the followed directory.")],
    offset: Annotated[int, QueryParam(ge=0, le=2**62, description="Where the body starts in the file.")] = 0,
    complete: Annotated[bool, QueryParam(description="A whole step file or trace that stopped growing.")] = False,
    reset: Annotated[bool, QueryParam(description="A new file under a known name (rotated or truncated): "
                                                  "the body starts it at offset 0.")] = False,
    trace_format: Annotated[str | None, QueryParam(alias="format", description="The file's format; "
                                                   "default: sniffed from its first bytes.")] = None,
    identity: Annotated[str | None, QueryParam(max_length=200, description="The file's device:inode "
                                               "where it is written (tells a rotated file).")] = None,
    mtime: Annotated[float | None, QueryParam(description="Its modification time (s since the epoch).")] = None,
    name: Annotated[str | None, QueryParam(max_length=500, description="Run name, when this append "
                                           "creates the run.")] = None,
    source: Annotated[str | None, QueryParam(max_length=4000, description="The followed directory, as "
                                             "the sender names it.")] = None,
) -> Any:
    """Commit a followed file's whole steps to the live run `run_id` (created by its first append), in one
    transaction with the file's committed offset. Idempotent: bytes before the committed offset are
    skipped. Answers the committed offset; 409 with `offset` when the body starts past it."""
    chunk = live.Chunk(_followed_name(file), offset, await _append_bytes(request, settings.upload_timeout_s),
                       format=_forced_format(trace_format), complete=complete, identity=identity,
                       mtime=mtime, reset=reset)
    name, source = _printable(name, "name"), _printable(source, "source")
    try:
        got = await run_in_threadpool(db.write, partial(watch.commit, run_id=run_id, chunk=chunk,
                                                        name=name, source=source), [run_id])
    except live.Gap as e:
        return Json({"ok": False, "error": f"{file}: {e.reason}", "status": 409, "offset": e.offset},
                    status_code=409)
    except RunConflict as e:
        raise ApiError(409, str(e)) from None
    except IngestError as e:
        await run_in_threadpool(db.write, partial(live.record_note, run_id=run_id, file_name=chunk.file_name,
                                                  note=str(e)), [run_id])
        raise ApiError(_ingest_status(e), e.worded(_form_field)) from None
    if got.steps or got.rows:
        request.app.state.overview_lines.mark(run_id)
    return {"ok": True, "run_id": run_id, "file": chunk.file_name, "committed": got.committed,
            "steps": got.steps, "rows": got.rows, "notes": got.notes}


async def remove_run(run_id: RunIdPath, db: DbDep) -> dict:
    if not await run_in_threadpool(db.write, partial(delete_run, run_id=run_id)):
        raise ApiError(404, f"unknown run {run_id!r}")
    return {"ok": True, "run_id": run_id}


def _simulate(run_id: str, cur) -> dict:
    """Simulate with the run's own log calibration when it timed its rollout, else the built-in grid.

    As `polytrace simulate RUN --calibration log --store`: a run with a generation time
    (timing_s/gen, or rank_stage 'gen') is fitted by workload/genfit.py, validated forward
    (gen_forecast) and simulated on that fit. A run the fit cannot use (no lengths, a single
    step) and a packed trace without times get the H200 replay grid, which needs per-rank
    response lengths.
    """
    from polytrace.workload import WorkloadError, genfit, simulate
    from polytrace.workload.costmodel import H200_REPLAY_GRID
    from polytrace.workload.whatif import DEFAULT_POLICIES, can_simulate, store, timed_rollout

    if not cur.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone():
        raise ApiError(404, f"unknown run {run_id!r}")
    try:
        cal = genfit.calibrate(cur, run_id) if timed_rollout(cur, run_id) else None
    except WorkloadError:
        cal = None  # too little to fit: the grid, or the 409 saying what the grid needs
    if cal is None and not can_simulate(cur, run_id):
        raise ApiError(409, f"run {run_id!r} has no samples with a dp_rank: the simulation needs "
                            "per-rank response lengths")
    policies = list(DEFAULT_POLICIES)
    try:
        if cal is not None and cal.kind == "step":
            # the CLI's default for a per-step fit: as recorded, and half the response cap
            policies = ["as-recorded", f"cap:{max(1, int(cal.steps.span) // 2)}"]
            rows = genfit.step_whatif(cal.steps, cal.step_model, [simulate.parse_cap(policies[1])], [])
        else:
            model = H200_REPLAY_GRID if cal is None else cal.cost_model
            rows = simulate.simulate(simulate.load_steps(cur, run_id), model, policies)
        calibration = H200_REPLAY_GRID.source if cal is None else "log"
        stored = store(cur, run_id, rows, calibration, None if cal is None else cal.forecast)
        overview.refresh(cur, [run_id])
    except WorkloadError as e:
        raise ApiError(409, str(e)) from None
    return {"ok": True, "run_id": run_id, "rows": stored, "policies": policies, "calibration": calibration}


async def simulate_run(run_id: str, db: DbDep) -> dict:
    """The run's own log calibration when it has a generation time, else the built-in H200 grid;
    one writer at a time, like uploads."""
    return await run_in_threadpool(db.write, partial(_simulate, run_id))


# --- uploads ----------------------------------------------------------------------------------

def _upload_body() -> dict:
    formats = [f.name for f in registry.FORMATS]
    schema = {
        "type": "object",
        "required": [FILE_FIELD],
        "additionalProperties": False,
        "properties": {
            FILE_FIELD: {"type": "array", "items": {"type": "string", "format": "binary"},
                         "description": "One or more trace files (several files make one run, "
                                        "like a directory); .gz is read transparently."},
            "name": {"type": "string", "description": "Run name (default: the file name)."},
            "format": {"type": "string", "enum": formats,
                       "description": "Skip detection and parse as this format."},
            **{field: {"type": "integer", "minimum": 1, "description": doc}
               for field, doc in GIVEN_RUN_FACTS.items()},
        },
    }
    return {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": schema}}}}


def _run_overrides(fields: dict) -> dict:
    """The run facts given as form fields: INTEGER columns, so from 1 to 2**31 - 1."""
    out = {}
    top = INT_RANGE["INTEGER"][1]
    for field in GIVEN_RUN_FACTS:
        raw = (fields.get(field) or "").strip()
        if not raw:
            continue
        # isdigit() alone lets through digits int() refuses, such as '²'
        if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= top:
            raise ApiError(422, f"field {field!r} must be an integer from 1 to {top}, got {raw[:40]!r}")
        out[field] = int(raw)
    return out


def _forced_format(value: str | None) -> str | None:
    if not value:
        return None
    try:
        return registry.get(value).name
    except IngestError as e:
        raise ApiError(422, f"parameter 'format': {e}") from None


def _form_field(option: str) -> str:
    """How the API names an ingest option in a hint: the form field that sets it."""
    return f"the {option!r} form field"


def _ingest_upload(upload: Upload, name: str | None, fmt: str | None, overrides: dict,
                   cur) -> IngestResult:
    """Ingest the uploaded files as one run (several files ingest like a directory); the log
    and the errors name the files as the client named them, never by their temporary paths.
    What an upload says is not trusted: a Parquet lake is restored as its bytes are."""
    target = upload.files[0] if len(upload.files) == 1 else upload.folder
    names = {upload.folder: upload.folder.name, **dict(zip(upload.files, upload.client_names))}
    try:
        result = ingest_paths(cur, [target], name=name, format=fmt, run_overrides=overrides,
                              names=names, option_words=_form_field, trusted=False)
    except IngestError as e:
        raise ApiError(_ingest_status(e), e.worded(_form_field)) from None
    if not result.existing:
        overview.refresh(cur, result.run_ids)
    return result


def _ingest_status(e: IngestError) -> int:
    if isinstance(e, RunConflict):
        return 409
    if isinstance(e, DiskFull):
        return 507
    # no format recognised the input: unsupported content rather than bad content
    return 415 if e.unrecognised else 400


async def upload_run(request: Request, db: DbDep, settings: SettingsDep) -> Json:
    upload = await receive(request, settings.max_upload_bytes, settings.upload_timeout_s)
    try:
        fmt = _forced_format(upload.fields.get("format"))
        overrides = _run_overrides(upload.fields)
        name = upload.fields.get("name") or None
        if len(upload.files) > 1:
            upload.name_folder()
        else:  # one file of a dropped folder: the run is the folder's
            name = name or upload.dropped_folder
        result = await run_in_threadpool(db.write, partial(_ingest_upload, upload, name, fmt, overrides))
    finally:
        await run_in_threadpool(upload.discard)
    body = {"ok": True, "run_id": result.run_id, "run_ids": result.run_ids, "format": result.format,
            "rows": result.rows, "existing": result.existing, "warnings": result.warnings}
    return Json(body, status_code=200 if result.existing else 201)


# --- queries ----------------------------------------------------------------------------------

async def list_queries() -> dict:
    return {"ok": True, "queries": [{**q.as_dict(), "url": f"/api/queries/{q.name}"}
                                    for q in load_catalog().values()]}


def _query_responses() -> dict:
    content = {MEDIA_TYPES["csv"].split(";")[0]: {}, MEDIA_TYPES["parquet"]: {}}
    return {200: {"content": content}, **_errors(404, 422, 504)}


def limits(settings: Settings) -> Limits:
    return Limits(timeout_ms=settings.query_timeout_ms, row_cap=settings.row_cap)


async def run_bound(db: Database, settings: Settings, query: Query, bound: dict) -> Answer:
    """Run a bound catalog query off the event loop; timeouts and rejected values become ApiError."""
    try:
        return await run_in_threadpool(db.query, query, bound, limits(settings))
    except QueryTimeout as e:
        raise ApiError(504, str(e)) from None
    except BadValue as e:
        raise ApiError(422, str(e)) from None


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
    return shown


async def chart_body(db: Database, settings: Settings, query: Query, params: dict[str, Any]) -> dict:
    """The JSON body of a query: its rows as the REST API answers them, shaped by any display
    parameters in `params` (the pages draw exactly this)."""
    shown = _display(params)
    try:
        bound = bind(query, {k: v for k, v in params.items() if k not in DISPLAY_PARAMS})
    except ParamError as e:
        raise ApiError(422, str(e)) from None
    result = await run_bound(db, settings, query, bound)
    await _runs_known(db, settings, query, params, result)
    body = render.json_body(result)
    if any(v is not None for v in shown.values()):
        body.update(display.for_chart(body["columns"], [list(r) for r in body["rows"]], query.chart,
                                      shown["_points"], shown["_x_from"], shown["_x_to"]))
    return body


async def _runs_known(db: Database, settings: Settings, query: Query, params: dict[str, Any],
                      result: Answer) -> None:
    """An empty answer about a run that is not here is a 404, not an empty 200 (a mistyped id read
    as a run with no data). Only an empty answer is checked: the others cost nothing more."""
    runs = _read_runs(query, params) if not result.table.num_rows else None
    if not runs:
        return
    missing = await run_in_threadpool(db.read, lambda cur: [r for r in runs if not exists(cur, r)],
                                      settings.query_timeout_ms, "the runs asked for")
    if missing:
        raise ApiError(404, f"unknown run {missing[0]!r}")


def _read_runs(query: Query, params: dict[str, str]) -> list[str] | None:
    """The runs a query's answer reads (its run_id or *_run parameters); None: it may read any."""
    names = [p.name for p in query.params if p.name == "run_id" or p.name.endswith("_run")]
    runs = [params.get(n) for n in names]
    return runs if names and all(runs) else None


async def answer(query: Query, request: Request, db: Database, settings: Settings,
                 fmt: str | None) -> Any:
    params = {k: v for k, v in request.query_params.items() if k != "format"}
    fmt = fmt or negotiate(request.headers.get("accept"))
    etag = db.etag(_read_runs(query, params), variant=fmt)
    if unchanged := not_modified(request, etag):
        return unchanged
    if fmt == "json":
        out = Json(await chart_body(db, settings, query, params))
    else:
        try:
            bound = bind(query, {k: v for k, v in params.items() if k not in DISPLAY_PARAMS})
        except ParamError as e:
            raise ApiError(422, str(e)) from None
        result = await run_bound(db, settings, query, bound)
        await _runs_known(db, settings, query, params, result)
        out = parquet_result(result, query.name) if fmt == "parquet" else csv_result(result, query.name)
    out.headers.update(validators(etag))
    return out


async def run_query(name: str, request: Request, db: DbDep, settings: SettingsDep,
                    format: FormatParam = None) -> Any:
    try:
        query = get_query(name)
    except KeyError:
        raise ApiError(404, f"unknown query {name!r}") from None
    return await answer(query, request, db, settings, format)


def _param_annotation(p) -> Any:
    py = _PY_TYPES.get(p.type, str)
    lo_hi = INT_RANGE.get(p.type)
    extra = {"ge": max(lo_hi[0], p.minimum or lo_hi[0]), "le": lo_hi[1]} if lo_hi else {}
    default = "" if p.required or p.default.upper() == "NULL" else f" Default: {p.default}."
    doc = f"{p.description}{default}".strip()
    annotation = py if p.required else py | None
    return Annotated[annotation, QueryParam(alias=p.name, description=doc, **extra)]


def _query_endpoint(query: Query):
    """An endpoint whose signature declares the query's parameters, so OpenAPI documents them."""
    async def endpoint(request: Request, db: DbDep, settings: SettingsDep, **kwargs) -> Any:
        return await answer(query, request, db, settings, kwargs.get("format"))

    base = [
        inspect.Parameter("request", inspect.Parameter.KEYWORD_ONLY, annotation=Request),
        inspect.Parameter("db", inspect.Parameter.KEYWORD_ONLY, annotation=DbDep),
        inspect.Parameter("settings", inspect.Parameter.KEYWORD_ONLY, annotation=SettingsDep),
        inspect.Parameter("format", inspect.Parameter.KEYWORD_ONLY, annotation=FormatParam,
                          default=None),
    ]
    declared = [
        inspect.Parameter(f"p_{p.name}", inspect.Parameter.KEYWORD_ONLY,
                          annotation=_param_annotation(p),
                          default=inspect.Parameter.empty if p.required else None)
        for p in query.params if p.name != "format"
    ]
    shaping = [
        inspect.Parameter(f"d{name}", inspect.Parameter.KEYWORD_ONLY, default=None,
                          annotation=Annotated[int | None, QueryParam(
                              alias=name, description=doc,
                              **({"ge": lo, "le": hi} if lo is not None else {}))])
        for name, (doc, lo, hi) in DISPLAY_PARAMS.items()
    ]
    endpoint.__signature__ = inspect.Signature(base + declared + shaping)
    endpoint.__name__ = f"query_{query.name}"
    return endpoint
