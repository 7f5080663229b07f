"""Findings: every catalog query of the Findings section, run for one run, as one ordered list.

Each finding query returns at most a row or two in the same columns (catalog.FINDING_COLUMNS): one
number, what it means, what to try, and the catalog URL that proves it. A query with nothing
to say returns no row. The REST endpoint, the CLI, the run page and the compare page all read
this one list.

Each finding query is a stored query: every writer keeps its answer for a run it changed
(queries/overview.refresh, queries/answers.py), and the list collected from them as JSON in the
run's overview line, so that a reader gets the list in one small lookup, without Arrow or a parse
of the catalog. A run without the list from the current catalog (a live run's latest append not
summed up yet, a lake that lost a partition) has it computed as it is read.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterable

import duckdb

from polytrace.queries.digest import digest
from polytrace.queries.limits import Limits

if TYPE_CHECKING:
    from polytrace.queries.catalog import Query
    from polytrace.queries.runner import Answer

SECTION = "Findings"
SEVERITIES = ("critical", "warn", "info")


def finding_queries() -> list[Query]:
    from polytrace.queries.catalog import load_catalog

    return [q for q in load_catalog().values() if q.section == SECTION]


def collect(answers: Iterable[Answer]) -> list[dict[str, Any]]:
    """The finding queries' rows as one list, most severe first, then by kind."""
    from polytrace.queries import render

    found = [f for answer in answers for f in render.records(answer)]
    return sorted(found, key=lambda f: (SEVERITIES.index(f["severity"]), f["kind"]))


def compute(target: Any, run_id: str, limits: Limits | None = None) -> list[dict[str, Any]]:
    """Every finding about `run_id`, from the catalog's queries (target: a DuckDB connection or an
    Engine)."""
    from polytrace.queries.runner import run

    return collect(run(target, q, {"run_id": run_id}, limits or Limits()) for q in finding_queries())


def stored(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]] | None:
    """The run's findings as its last write kept them, or None when the current catalog did not
    compute them."""
    rows = con.execute("SELECT findings FROM run_overview WHERE run_id = $run_id AND catalog = $catalog "
                       "AND findings IS NOT NULL", {"run_id": run_id, "catalog": digest()}).fetchall()
    return json.loads(rows[0][0]) if rows else None


def findings(target: Any, run_id: str, limits: Limits | None = None) -> list[dict[str, Any]]:
    """Every finding about `run_id`: the stored list when it is whole, else computed."""
    if isinstance(target, duckdb.DuckDBPyConnection) and (kept := stored(target, run_id)) is not None:
        return kept
    return compute(target, run_id, limits)
