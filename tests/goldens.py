"""Golden cases: tiny canonical-table CSVs loaded into a fresh DuckDB, and the golden runner.

`<folder>/<query>__<case>[__<variant>].csv` is the expected output of the catalog query on
the tables of `tests/fixtures/golden/<case>/`, for run r1; a variant that names another run
of the case is for that run, and VARIANTS gives other parameters by file stem.
Any folder of such files works: tests/golden/ for the bundled catalog, a site's own next to
its POLYTRACE_EXTRA_QUERIES.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path

import duckdb

from polytrace.queries.catalog import bind, load_catalog
from polytrace.queries.runner import run_bound
from polytrace.store.aggregates import materialize
from polytrace.store.migrate import ensure as ensure_schema

HERE = Path(__file__).resolve().parent
CASES = HERE / "fixtures" / "golden"
GOLDEN = HERE / "golden"
TOLERANCE = 1e-9
# Goldens whose parameters are not a run_id, by file stem.
VARIANTS = {
    "length_histogram__packed__step1": {"step_from": "1", "step_to": "1"},
}


def case_names() -> list[str]:
    return sorted(p.name for p in CASES.iterdir() if p.is_dir())


def load_case(case: str, db: str = ":memory:") -> duckdb.DuckDBPyConnection:
    """A fresh database (in memory, or the file `db`) holding one case's tables, aggregates
    materialized.

    Every `<table>.csv` goes straight into the canonical table of that name (by column
    name, empty field = NULL), so the goldens test the queries and not the parsers.
    """
    con = duckdb.connect(db)
    ensure_schema(con)
    for path in sorted((CASES / case).glob("*.csv")):
        con.execute(f'INSERT INTO "{path.stem}" BY NAME '
                    "SELECT * FROM read_csv($path, header = true, all_varchar = true)",
                    {"path": str(path)})
    for (run_id,) in con.execute("SELECT run_id FROM runs").fetchall():
        materialize(con, run_id)
    return con


def read_expected(path: Path) -> tuple[list[str], list[list[str]]]:
    with path.open(newline="") as f:
        header, *rows = list(csv.reader(f))
    return header, rows


def same_rows(a: list[tuple], b: list[tuple]) -> bool:
    """Equal rows, floats to TOLERANCE: parallel aggregation may add in another order."""
    def same(x, y) -> bool:
        if isinstance(x, float) and isinstance(y, float):
            return math.isclose(x, y, rel_tol=TOLERANCE, abs_tol=TOLERANCE) or (x != x and y != y)
        return x == y

    return len(a) == len(b) and all(
        len(r) == len(q) and all(same(x, y) for x, y in zip(r, q)) for r, q in zip(a, b))


def same_cell(actual, expected: str) -> bool:
    if expected == "":
        return actual is None
    if actual is None:
        return False
    if isinstance(actual, bool):
        return str(actual).lower() == expected.lower()
    if isinstance(actual, (int, float)):
        return math.isclose(actual, float(expected), rel_tol=TOLERANCE, abs_tol=TOLERANCE)
    return str(actual) == expected


def mismatches(columns: list[str], rows: list[tuple], path: Path) -> list[str]:
    """What differs between a result and its expected CSV; empty when they agree."""
    header, expected = read_expected(path)
    if columns != header:
        return [f"columns {columns} != expected {header}"]
    if len(rows) != len(expected):
        return [f"{len(rows)} rows != expected {len(expected)}: {rows}"]
    return [f"row {i} column {c}: {a!r} != expected {e!r}"
            for i, (row, want) in enumerate(zip(rows, expected))
            for c, a, e in zip(columns, row, want) if not same_cell(a, e)]


def golden_files(folder: Path = GOLDEN) -> list[Path]:
    return sorted(folder.glob("*__*.csv"))


def golden_mismatches(path: Path, cases: dict[str, duckdb.DuckDBPyConnection]) -> list[str]:
    """Run the golden's query (from the catalog as it loads now) on its case's tables and
    compare with the expected CSV; empty when they agree."""
    name, case, *variant = path.stem.split("__")
    query = load_catalog()[name]
    runs = {r[0] for r in cases[case].execute("SELECT run_id FROM runs").fetchall()}
    run_id = variant[0] if variant and variant[0] in runs else "r1"
    params = {"run_id": run_id} if any(p.name == "run_id" for p in query.params) else {}
    params.update(VARIANTS.get(path.stem, {}))
    result = run_bound(cases[case], query, bind(query, params))
    return mismatches(result.columns, result.rows, path)
