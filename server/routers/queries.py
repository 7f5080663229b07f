"""REST: the query catalog, every query at /api/queries/{name} in JSON, CSV or Parquet (the
formats of queries/render.py RENDERERS), and one documented OpenAPI operation per query."""
from __future__ import annotations

import inspect
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from fastapi import Query as QueryParam
from pydantic import BaseModel
from starlette.routing import BaseRoute

from polytrace.queries import render
from polytrace.queries.catalog import INT_RANGE, Query, get_query, load_catalog
from polytrace.server.db import Database
from polytrace.server.deps import DbDep, SettingsDep
from polytrace.server.errors import ApiError, error_responses
from polytrace.server.reads import (
    DISPLAY_PARAMS,
    chart_body,
    not_modified,
    query_result,
    read_runs,
    validators,
)
from polytrace.server.responses import Json, download, negotiate
from polytrace.settings import Settings

_OTHER_FORMATS = render.HTTP_FORMATS[1:]
FormatParam = Annotated[
    Literal[render.HTTP_FORMATS] | None,
    QueryParam(description=f"Answer as {render.HTTP_FORMATS[0]} (default), {', '.join(_OTHER_FORMATS[:-1])} "
                           f"or {_OTHER_FORMATS[-1]}; overrides the Accept header."),
]
_PY_TYPES = {"INTEGER": int, "BIGINT": int, "DOUBLE": float, "BOOLEAN": bool}



class Catalog(BaseModel):
    ok: bool = True
    queries: list[dict[str, Any]]


class QueryResult(BaseModel):
    ok: bool = True
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool



def router() -> APIRouter:
    """/api/queries/{name} first: FastAPI tries the routes in turn, and most requests are a chart's query."""
    routes = APIRouter(prefix="/api", tags=["api"], default_response_class=Json)
    routes.add_api_route("/queries/{name}", run_query, methods=["GET"], operation_id="run_query",
                         response_model=QueryResult, responses=_query_responses(),
                         summary="Run any catalog query by name")
    routes.add_api_route("/queries", list_queries, methods=["GET"], operation_id="list_queries",
                         response_model=Catalog, summary="The query catalog")
    return routes


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


async def list_queries() -> dict:
    return {"ok": True, "queries": [{**q.as_dict(), "url": f"/api/queries/{q.name}"}
                                    for q in load_catalog().values()]}


def _query_responses() -> dict:
    content = {render.RENDERERS[f].media_type.split(";")[0]: {} for f in _OTHER_FORMATS}
    return {200: {"content": content}, **error_responses(404, 422, 504)}


async def query_response(query: Query, request: Request, db: Database, settings: Settings,
                         fmt: str | None) -> Any:
    """A catalog query's HTTP response in the format asked for, with its ETag (304 when unchanged)."""
    params = {k: v for k, v in request.query_params.items() if k != "format"}
    fmt = fmt or negotiate(request.headers.get("accept"))
    etag = db.etag(read_runs(query, params), variant=fmt)
    if unchanged := not_modified(request, etag):
        return unchanged
    if fmt == "json":
        out = Json(await chart_body(db, settings, query, params))
    else:
        out = download(await query_result(db, settings, query, params), query.name, fmt)
    out.headers.update(validators(etag))
    return out


async def run_query(name: str, request: Request, db: DbDep, settings: SettingsDep,
                    format: FormatParam = None) -> Any:
    try:
        query = get_query(name)
    except KeyError:
        raise ApiError(404, f"unknown query {name!r}") from None
    return await query_response(query, request, db, settings, format)


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
        return await query_response(query, request, db, settings, kwargs.get("format"))

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

