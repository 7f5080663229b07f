"""The query catalog: queries/*.sql and their header contracts, the shared views inlined, linted;
parameters bound.

model (Query, View, Param, Column, the header's vocabulary), parse (header and SQL), compose
(views inlined as CTEs), lint (the contract and the SQL habits), bind (typed parameter values)
and load (the catalog, loaded once); its digest is queries/digest.py's. Callers import from here;
the names below are the package's.
`compose`, `lint` and `bind` here are the functions, as before the split; a module of the package
is reached by its full path (`from polytrace.queries.catalog.lint import ...`).
"""
from polytrace.queries.catalog.bind import bind
from polytrace.queries.catalog.compose import compose, composed, cte_names, table_references, views_needed
from polytrace.queries.catalog.lint import lint, lint_view, statement_problem, uncast_sums, unguarded_divisions
from polytrace.queries.catalog.load import get_query, load_catalog, load_query, load_views
from polytrace.queries.catalog.model import (
    CHART_KEYS,
    CHART_KINDS,
    FINDING_COLUMNS,
    FMT_KINDS,
    INT_RANGE,
    NUMERIC_TYPES,
    PARAM_TYPES,
    SECTIONS,
    CatalogError,
    Column,
    Param,
    ParamError,
    Query,
    View,
)
from polytrace.queries.catalog.parse import LIST_KEYS, PARAM_USE, code_only, parse_chart, parse_query, parse_view
from polytrace.queries.digest import catalog_texts, digest, digest_of

__all__ = [
    "CHART_KEYS", "CHART_KINDS", "FINDING_COLUMNS", "FMT_KINDS", "INT_RANGE", "LIST_KEYS", "NUMERIC_TYPES",
    "PARAM_TYPES", "PARAM_USE", "SECTIONS", "CatalogError", "Column", "Param", "ParamError", "Query", "View",
    "bind", "catalog_texts", "code_only", "compose", "composed", "cte_names", "digest", "digest_of", "get_query", "lint",
    "lint_view", "load_catalog", "load_query", "load_views", "parse_chart", "parse_query", "parse_view",
    "statement_problem", "table_references", "uncast_sums", "unguarded_divisions", "views_needed",
]
