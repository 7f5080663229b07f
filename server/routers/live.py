"""REST: live runs: a run's live status, and appending a followed file's new bytes (a training
job's callback, or `polytrace watch --server`)."""
from __future__ import annotations

from functools import partial
from pathlib import PurePosixPath
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Request, Response
from fastapi import Query as QueryParam
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel

from polytrace import service
from polytrace.ingest import live
from polytrace.ingest.contract import IngestError
from polytrace.ingest.load import RunConflict
from polytrace.ingest.options import IngestOptions
from polytrace.ingest.parsing import now
from polytrace.server.deps import DbDep, RunIdPath, SettingsDep, WriterDep
from polytrace.server.errors import ApiError, error_responses, ingest_status
from polytrace.server.reads import not_modified, validators
from polytrace.server.responses import Json
from polytrace.server.uploads import form_field, forced_format
from polytrace.store.runs import exists

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
    warnings: list[str]    # what the parse of these bytes said (lines cut short, a step logged twice)



# A run that got an append this recently is live, even when no directory of this server feeds it.
LIVE_WINDOW_S = 300
# A poll that names the run's current ETag may wait this long for its next write (a long poll: the
# page learns of a new step as it lands, not at its next poll), looking every LONG_POLL_TICK_S.
LONG_POLL_MAX_S = 10.0
LONG_POLL_TICK_S = 0.05
WaitParam = Annotated[float, QueryParam(
    ge=0, le=LONG_POLL_MAX_S,
    description="With If-None-Match naming the run's current ETag: wait up to this many seconds for "
                "the run's next write before answering 304")]


# One append's bytes are held in memory: a log is sent in chunks, a step file or trace whole.
APPEND_MAX_BYTES = 256 << 20



def router() -> APIRouter:
    routes = APIRouter(prefix="/api", tags=["api"], default_response_class=Json)
    routes.add_api_route("/runs/{run_id}/live", live_status, methods=["GET"], operation_id="live_status",
                         response_model=LiveStatus, responses=error_responses(404, 422),
                         summary="A live run: when its last step landed, and each followed file's committed offset")
    routes.add_api_route("/runs/{run_id}/append", append_run, methods=["POST"], operation_id="append_run",
                         dependencies=[WriterDep], response_model=AppendedBody, openapi_extra=_append_body(),
                         responses={**error_responses(400, 401, 403, 408, 413, 415, 422, 507),
                                    409: {"description": "A gap: resend from `offset`",
                                          "content": {"application/json": {}}}},
                         summary="Append a followed file's new bytes to a live run (a training job's callback)")
    return routes


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
                      settings: SettingsDep, wait: WaitParam = 0.0) -> Any:
    """Polled by the run page (and a pusher resuming): answers 304 while nothing changed, after
    waiting up to `wait` seconds for a change."""
    etag = await _next_etag(request, db, run_id, wait)
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


async def _next_etag(request: Request, db, run_id: str, wait: float) -> str:
    """The run's ETag: at once if it is not the one the request names, else once it changes, or
    after `wait` seconds, or when the client has gone."""
    etag = db.etag([run_id])
    deadline = anyio.current_time() + wait
    while (not_modified(request, etag) and anyio.current_time() < deadline
           and not await request.is_disconnected()):
        await anyio.sleep(LONG_POLL_TICK_S)
        etag = db.etag([run_id])
    return etag


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
                       format=forced_format(trace_format), complete=complete, identity=identity,
                       mtime=mtime, reset=reset)
    name, source = _printable(name, "name"), _printable(source, "source")
    try:
        got = await run_in_threadpool(db.write, partial(
            service.append, run_id=run_id, chunk=chunk, name=name, source=source,
            options=IngestOptions.of(settings), lines=request.app.state.overview_lines), [run_id])
    except live.Gap as e:
        return Json({"ok": False, "error": f"{file}: {e.reason}", "status": 409, "offset": e.offset},
                    status_code=409)
    except RunConflict as e:
        raise ApiError(409, str(e)) from None
    except IngestError as e:
        await run_in_threadpool(db.write, partial(live.record_note, run_id=run_id, file_name=chunk.file_name,
                                                  note=str(e)), [run_id])
        raise ApiError(ingest_status(e), e.worded(form_field)) from None
    return {"ok": True, "run_id": run_id, "file": chunk.file_name, "committed": got.committed,
            "steps": got.steps, "rows": got.rows, "notes": got.notes, "warnings": got.warnings}

