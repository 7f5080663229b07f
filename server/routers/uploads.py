"""REST: uploading trace files as one run."""
from __future__ import annotations

from functools import partial
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel

from polytrace import service
from polytrace.ingest import registry
from polytrace.ingest.contract import IngestError
from polytrace.ingest.load import IngestResult
from polytrace.ingest.options import IngestOptions
from polytrace.ingest.run_facts import GIVEN_FRAMEWORK, GIVEN_RUN_FACTS
from polytrace.queries.catalog import INT_RANGE
from polytrace.server.db import Database
from polytrace.server.deps import DbDep, SettingsDep, WriterDep
from polytrace.server.errors import ApiError, error_responses, ingest_status
from polytrace.server.responses import Json
from polytrace.store import vocabulary
from polytrace.server.uploads import FILE_FIELD, Upload, forced_format, form_field, receive
from polytrace.settings import Settings

# Uploads one client address may have in progress: each holds a temporary folder, a parse's
# CPU and memory, and a staging database
UPLOADS_PER_CLIENT = 2

class Uploaded(BaseModel):
    ok: bool = True
    run_id: str
    run_ids: list[str]  # several only when the upload is a Parquet lake of several runs
    format: str
    rows: dict[str, int]
    existing: bool
    warnings: list[str]



def router() -> APIRouter:
    routes = APIRouter(prefix="/api", tags=["api"], default_response_class=Json)
    routes.add_api_route("/runs", upload_run, methods=["POST"], operation_id="upload_run",
                         status_code=201, dependencies=[WriterDep], response_model=Uploaded,
                         summary="Upload trace files as one run", openapi_extra=_upload_body(),
                         responses={200: {"model": Uploaded, "description": "Already ingested"},
                                    **error_responses(400, 401, 403, 408, 409, 413, 415, 422, 429, 507)})
    return routes


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
            "framework": {"type": "string", "enum": sorted(vocabulary.frameworks()), "description": GIVEN_FRAMEWORK},
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
    if (fields.get("framework") or "").strip():
        try:
            out["framework"] = vocabulary.framework_named(fields["framework"])
        except vocabulary.VocabularyError as e:
            raise ApiError(422, f"field 'framework': {e}") from None
    return out


def _stage_upload(upload: Upload, name: str | None, fmt: str | None, overrides: dict,
                  settings: Settings) -> IngestResult:
    """Ingest the uploaded files as one run into the upload's own staging database, without the
    server's writer (several files ingest like a directory); the log and the errors name the
    files as the client named them, never by their temporary paths. What an upload says is not
    trusted: a Parquet lake is restored as its bytes are."""
    target = upload.files[0] if len(upload.files) == 1 else upload.folder
    names = {upload.folder: upload.folder.name, **dict(zip(upload.files, upload.client_names))}
    return service.stage_run(_staging(upload), [target], options=IngestOptions.of(settings),
                             memory_limit=settings.memory_limit, threads=settings.threads, name=name,
                             format=fmt, run_overrides=overrides, names=names, option_words=form_field,
                             trusted=False)


def _staging(upload: Upload) -> Path:
    return upload.root / "staging.duckdb"


async def upload_run(request: Request, db: DbDep, settings: SettingsDep) -> Json:
    client = request.client.host if request.client else "?"
    uploading = request.app.state.uploading
    if uploading.get(client, 0) >= UPLOADS_PER_CLIENT:
        raise ApiError(429, f"{UPLOADS_PER_CLIENT} uploads from this address are in progress: send the next "
                            "when one has answered", {"Retry-After": "5"})
    uploading[client] = uploading.get(client, 0) + 1
    try:
        result = await _upload(request, db, settings)
    finally:
        uploading[client] -= 1
        if not uploading[client]:
            del uploading[client]
    body = {"ok": True, "run_id": result.run_id, "run_ids": result.run_ids, "format": result.format,
            "rows": result.rows, "existing": result.existing, "warnings": result.warnings}
    return Json(body, status_code=200 if result.existing else 201)


async def _upload(request: Request, db: Database, settings: Settings) -> IngestResult:
    """Receive, parse into the upload's staging database (no lock), commit (the writer)."""
    upload = await receive(request, settings.max_upload_bytes, settings.upload_timeout_s)
    try:
        fmt = forced_format(upload.fields.get("format"))
        overrides = _run_overrides(upload.fields)
        name = upload.fields.get("name") or None
        if len(upload.files) > 1:
            upload.name_folder()
        else:  # one file of a dropped folder: the run is the folder's
            name = name or upload.dropped_folder
        try:
            staged = await run_in_threadpool(_stage_upload, upload, name, fmt, overrides, settings)
        except IngestError as e:  # what the parse refused goes to the server's ingest log
            await run_in_threadpool(db.write, partial(service.commit_failure, staging=_staging(upload)))
            raise ApiError(ingest_status(e), e.worded(form_field)) from None
        try:
            return await run_in_threadpool(db.write, partial(service.commit_staged, staging=_staging(upload),
                                                             staged=staged, format=fmt, run_overrides=overrides))
        except IngestError as e:
            raise ApiError(ingest_status(e), e.worded(form_field)) from None
    finally:
        await run_in_threadpool(upload.discard)

