"""Loading: the bundled catalog and a site's own queries, parsed, composed and linted once."""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from functools import lru_cache
from importlib import resources
from pathlib import Path

from polytrace.queries.catalog.compose import composed, inputs, table_references, views_needed
from polytrace.queries.catalog.lint import lint, lint_view
from polytrace.queries.catalog.model import CatalogError, Query, View
from polytrace.queries.catalog.parse import code_only, parse_query, parse_view
from polytrace.queries.digest import extra_queries, sql_files
from polytrace.store.aggregates import names as aggregate_names
from polytrace.store.migrate import schema_sql, views_sql

_CREATE_TABLE = re.compile(r"CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", re.IGNORECASE)
_CREATE_VIEW = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?VIEW\s+(\w+)\s+AS\b(.*?);",
                          re.IGNORECASE | re.DOTALL)

@lru_cache(maxsize=1)
def store_relations() -> dict[str, frozenset[str]]:
    """Every table of the store's schema (aggregates included) as itself, and each of its views as
    the tables it reads: the names no catalog view may take, and what a query's inputs resolve to."""
    ddl = code_only(schema_sql() + "\n" + views_sql())
    tables = {n.lower() for n in _CREATE_TABLE.findall(ddl)} | set(aggregate_names())
    relations = {t: frozenset({t}) for t in tables}
    for name, body in _CREATE_VIEW.findall(ddl):  # in order: a view reads what is created before it
        read = (relations.get(t, frozenset()) for t in table_references(body))
        relations[name.lower()] = frozenset().union(*read)
    return relations


@lru_cache(maxsize=1)
def load_views() -> dict[str, View]:
    """queries/views/*.sql, linted."""
    folder = resources.files("polytrace.queries").joinpath("views")
    views = {e.name[:-4]: parse_view(e.name[:-4], e.read_text()) for e in sql_files(folder)}
    tables = set(store_relations())
    for view in views.values():
        lint_view(view, views, tables)
    # every view, each after the views it reads (a cycle is a CatalogError)
    for name in views_needed(" ".join(f"FROM {name}" for name in views), views):
        views[name] = replace(views[name], inputs=inputs(views[name].sql, views, store_relations()))
    return views


def load_catalog() -> dict[str, Query]:
    """The bundled queries, plus any .sql files in $POLYTRACE_EXTRA_QUERIES (a site's own
    queries in the same format; tests use it for a deliberately slow query)."""
    return _load_catalog(extra_queries())


def load_query(name: str, text: str, views: Mapping[str, View], *, source: str | None = None,
               strict: bool = True) -> Query:
    """Parse one query file, inline the views it reads and lint it."""
    query = composed(parse_query(name, text, source), views)
    lint(query, views, strict=strict)
    return query


@lru_cache(maxsize=4)
def _load_catalog(extra: str | None) -> dict[str, Query]:
    views = load_views()
    catalog = {}
    for entry in sql_files(resources.files("polytrace.queries")):
        name = entry.name[:-4]
        query = load_query(name, entry.read_text(), views)
        catalog[name] = replace(query, inputs=inputs(query.text, views, store_relations()))
    if extra:
        folder = Path(extra)
        if not folder.is_dir():
            raise CatalogError(f"POLYTRACE_EXTRA_QUERIES: {folder} is not a directory")
        for entry in sql_files(folder):
            name = entry.name[:-4]
            catalog[name] = load_query(name, entry.read_text(), views, source=str(entry), strict=False)
    return catalog


def get_query(name: str) -> Query:
    catalog = load_catalog()
    if name not in catalog:
        raise KeyError(name)
    return catalog[name]
