"""REST API: runs, uploads and the query catalog, all answering in one error shape."""
from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool

from queries.catalog import ParamError, bind, get_query, load_catalog
from server.db import QueryTimeout
from server.deps import DbDep, SettingsDep
from server.errors import ApiError

router = APIRouter(prefix="/api")


@router.get("/health", operation_id="health")
def health() -> dict:
    return {"ok": True}


@router.get("/queries", operation_id="list_queries")
def list_queries() -> dict:
    return {"ok": True, "queries": [q.as_dict() for q in load_catalog().values()]}


def _jsonable(v):
    if isinstance(v, float) and v != v:
        return None
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return v


@router.get("/queries/{name}", operation_id="run_query")
async def run_query(name: str, request: Request, db: DbDep, settings: SettingsDep) -> dict:
    try:
        query = get_query(name)
    except KeyError:
        raise ApiError(404, f"unknown query {name!r}") from None
    params = {k: v for k, v in request.query_params.items() if k != "format"}
    try:
        bound = bind(query, params)
    except ParamError as e:
        raise ApiError(422, str(e)) from None
    try:
        result = await run_in_threadpool(db.query, query, bound, settings.query_timeout_ms,
                                         settings.row_cap)
    except QueryTimeout as e:
        raise ApiError(504, str(e)) from None
    return {"ok": True, "columns": result.columns,
            "rows": [[_jsonable(v) for v in r] for r in result.rows],
            "truncated": result.truncated}
