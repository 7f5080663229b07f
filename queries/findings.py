"""Findings: every catalog query of the Findings section, run for one run, as one ordered list.

Each finding query returns at most a row or two in the same columns (catalog.FINDING_COLUMNS): one
number, what it means, what to try, and the catalog URL that proves it. A query with nothing
to say returns no row. The REST endpoint, the CLI, the run page and the compare page all read
this one list.

Every writer computes the list when it changes a run and keeps it in run_findings beside the
run's overview line (queries/overview.refresh), so that a reader gets it in one small scan; a
run without a whole list from the current catalog has it computed as it is read.
"""
from __future__ import annotations

from typing import Any, Iterable

import duckdb

from polytrace.queries import render
from polytrace.queries.catalog import FINDING_COLUMNS, Query, digest, load_catalog
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


# The stored list, and how many findings the run's overview line counts: fewer rows than that
# (a lake that lost a partition, a table added after the line) is not the whole list.
STORED = f"""
SELECT {", ".join(f"f.{n}" for n, _ in FINDING_COLUMNS)}, o.findings_critical + o.findings_warn + o.findings_info
FROM run_overview o LEFT JOIN run_findings f ON f.run_id = o.run_id AND f.catalog = o.catalog
WHERE o.run_id = $run_id AND o.catalog = $catalog
ORDER BY f.position
"""


def stored(con: duckdb.DuckDBPyConnection, run_id: str) -> list[dict[str, Any]] | None:
    """The run's findings as its last write stored them, or None when there is no whole list from
    the current catalog."""
    rows = con.execute(STORED, {"run_id": run_id, "catalog": digest()}).fetchall()
    kept = [r[:-1] for r in rows if r[0] is not None]  # kind is never NULL in a stored row
    if not rows or rows[0][-1] != len(kept):
        return None
    names = [n for n, _ in FINDING_COLUMNS]
    return [{n: render.jsonable(v) for n, v in zip(names, r)} for r in kept]


def findings(target: Any, run_id: str, limits: Limits = Limits()) -> list[dict[str, Any]]:
    """Every finding about `run_id`: the stored list when it is whole, else computed."""
    if isinstance(target, duckdb.DuckDBPyConnection) and (kept := stored(target, run_id)) is not None:
        return kept
    return compute(target, run_id, limits)
