"""Findings: every catalog query of the Findings section, run for one run, as one ordered list.

Each finding query returns at most a row or two in the same columns (catalog.FINDING_COLUMNS): one
number, what it means, what to try, and the catalog URL that proves it. A query with nothing
to say returns no row. The REST endpoint, the CLI, the run page and the compare page all read
this one list.

Each finding query is a stored query: every writer keeps its answer for a run it changed
(queries/overview.refresh, queries/answers.py), so that a reader collects the list from those
answers in one small lookup. A run without the answer of every finding query from the current
catalog (a live run's latest append not summed up yet, a lake that lost a partition) has its
list computed as it is read.
"""
from __future__ import annotations

from typing import Any, Iterable

import duckdb

from polytrace.queries import answers, render
from polytrace.queries.catalog import Query, load_catalog
from polytrace.queries.runner import Answer, Limits, run

SECTION = "Findings"
SEVERITIES = ("critical", "warn", "info")


def finding_queries() -> list[Query]:
    return [q for q in load_catalog().values() if q.section == SECTION]


def collect(answers: Iterable[Answer]) -> list[dict[str, Any]]:
    """The finding queries' rows as one list, most severe first, then by kind."""
    found = [f for answer in answers for f in render.records(answer)]
    return sorted(found, key=lambda f: (SEVERITIES.index(f["severity"]), f["kind"]))


def compute(target: Any, run_id: str, limits: Limits = Limits()) -> list[dict[str, Any]]:
    """Every finding about `run_id`, from the catalog's queries (target: a DuckDB connection or an
    Engine)."""
    return collect(run(target, q, {"run_id": run_id}, limits) for q in finding_queries())


def stored(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]] | None:
    """The run's findings from the answers its last write kept, or None when the current catalog's
    finding queries do not all have one."""
    kept = answers.read_all(con, run_id, finding_queries())
    return None if kept is None else collect(kept)


def findings(target: Any, run_id: str, limits: Limits = Limits()) -> list[dict[str, Any]]:
    """Every finding about `run_id`: the stored list when it is whole, else computed."""
    if isinstance(target, duckdb.DuckDBPyConnection) and (kept := stored(target, run_id)) is not None:
        return kept
    return compute(target, run_id, limits)
