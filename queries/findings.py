"""Findings: every catalog query of the Findings section, run for one run, as one ordered list.

Each finding query returns at most a row or two in the same columns (catalog.FINDING_COLUMNS): one
number, what it means, what to try, and the catalog URL that proves it. A query with nothing
to say returns no row. The REST endpoint, the CLI, the run page and the compare page all read
this one list.
"""
from __future__ import annotations

from typing import Any, Iterable

from polytrace.queries import render
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


def findings(target: Any, run_id: str, limits: Limits = Limits()) -> list[dict[str, Any]]:
    """Every finding about `run_id` (target: a DuckDB connection or an Engine)."""
    return collect(run(target, q, {"run_id": run_id}, limits) for q in finding_queries())
