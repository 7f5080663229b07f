"""Stored answers: the whole answer of each `-- stored: yes` query for a run, kept in run_answers by
the writer that changed the run (queries/overview.refresh), so that a reader gets the dashboard's
queries (run_summary, step_budget, the findings, every chart of the run page at its defaults) in
one small lookup instead of planning and running their SQL.

A kept answer is kept twice: as an Arrow IPC stream (its types, for REST and the pages) and, when
JSON gives every column's values back exactly, as JSON rows that the CLI prints without importing
Arrow (whose import, numpy's with it, cost `polytrace query` on a kept answer more than all the
rest of the command did).

A kept answer is the one for the run_id and the defaults of the query's other parameters, from
the current catalog; any write that changes the run's rows deletes it in its own transaction
(store.runs.changed), so that what a reader finds is always the run's answer. Without one (a
live run's latest append not summed up yet, a database from before the table) the reader runs
the query.
"""
from __future__ import annotations

import json
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import duckdb

from polytrace.queries.digest import digest
from polytrace.queries.render import Rows

if TYPE_CHECKING:
    import pyarrow as pa

    from polytrace.queries.catalog import Query
    from polytrace.queries.runner import Answer

# An answer longer than this is not kept: its lookup would cost what running the query does.
MAX_ROWS = 100_000
# Nor are its JSON rows past this: printing thousands of rows costs more than Arrow's import, and
# a refresh holds every JSON text at once (all of a 10,000-step run's took ~2 KB a step of memory)
JSON_MAX_ROWS = 1_000


def stored_queries() -> list[Query]:
    from polytrace.queries.catalog import load_catalog

    return [q for q in load_catalog().values() if q.stored]


def encode(answer: Answer) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, answer.table.schema) as writer:
        writer.write_table(answer.table)
    return sink.getvalue().to_pybytes()


def decode(blob: bytes, row_cap: int | None) -> Answer:
    import pyarrow as pa

    from polytrace.queries.runner import Answer

    table = pa.ipc.open_stream(blob).read_all()
    if row_cap is not None and table.num_rows > row_cap:
        return Answer(table.slice(0, row_cap), True)
    return Answer(table, False)


def json_rows(answer: Answer) -> str | None:
    """The answer's columns and rows as JSON, or None when it is longer than JSON_MAX_ROWS or a
    column's type is one JSON does not give back as it was (a timestamp, a decimal, a struct):
    ints, floats (NaN too: Python's json writes and reads it), text, booleans and lists of them
    come back equal."""
    if answer.table.num_rows > JSON_MAX_ROWS or not all(_json_exact(f.type) for f in answer.table.schema):
        return None
    # its rows as Python values for this answer alone, not kept on it (Answer.rows): a refresh
    # holds every answer at once
    rows = list(zip(*(column.to_pylist() for column in answer.table.columns)))
    return json.dumps({"columns": answer.columns, "rows": rows})


@lru_cache(maxsize=256)  # a refresh asks of every column of every answer: a few types in all
def _json_exact(kind: pa.DataType) -> bool:
    import pyarrow as pa

    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _json_exact(kind.value_type)
    return any(test(kind) for test in (pa.types.is_integer, pa.types.is_floating, pa.types.is_string,
                                       pa.types.is_large_string, pa.types.is_boolean, pa.types.is_null))


def keepable(query: Query, bound: dict[str, Any]) -> bool:
    """Whether `bound` asks what a kept answer answers: a stored query, a run, the defaults."""
    from polytrace.queries.catalog import bind

    return query.stored and "run_id" in bound and bound == bind(query, {"run_id": bound["run_id"]})


def read(con: duckdb.DuckDBPyConnection, query: Query, bound: dict[str, Any],
         row_cap: int | None = None) -> Answer | None:
    """The kept answer to `query` with `bound`, or None when there is none to give."""
    return read_kept(con, bound["run_id"], query.name, row_cap) if keepable(query, bound) else None


def read_kept(con: duckdb.DuckDBPyConnection, run_id: str, name: str, row_cap: int | None = None) -> Answer | None:
    """The answer kept for query `name` on the run at the defaults of its other parameters, or
    None; looked up by name, without a parse of the catalog."""
    found = _kept_row(con, run_id, name, "answer")
    return decode(found[0], row_cap) if found else None


def _kept_row(con: duckdb.DuckDBPyConnection, run_id: str, name: str, columns: str) -> tuple | None:
    """`columns` of the answer kept for query `name` on the run by the current catalog, or None."""
    rows = con.execute(f"SELECT {columns} FROM run_answers WHERE run_id = $run_id AND query = $query "
                       "AND catalog = $catalog LIMIT 1",
                       {"run_id": run_id, "query": name, "catalog": digest()}).fetchall()
    return rows[0] if rows else None


def read_printable(con: duckdb.DuckDBPyConnection, run_id: str, name: str,
                   row_cap: int | None = None) -> Rows | Answer | None:
    """The kept answer to query `name` as read_kept gives it, as its JSON rows when they are kept:
    what the CLI prints, without Arrow."""
    found = _kept_row(con, run_id, name, "rows_json, answer")
    if not found:
        return None
    text, blob = found
    if text is None:
        return decode(blob, row_cap)
    kept = json.loads(text)
    rows = [tuple(r) for r in kept["rows"]]
    cut = row_cap is not None and len(rows) > row_cap
    return Rows(kept["columns"], rows[:row_cap] if cut else rows, cut)


def read_all(con: duckdb.DuckDBPyConnection, run_id: str, queries: list[Query]) -> list[Answer] | None:
    """The kept answers to these queries for the run at their defaults, in their order, in one
    lookup; None unless every one of them is kept."""
    names = [q.name for q in queries]
    rows = dict(con.execute("SELECT query, answer FROM run_answers WHERE run_id = $run_id "
                            "AND catalog = $catalog AND list_contains($queries, query)",
                            {"run_id": run_id, "catalog": digest(), "queries": names}).fetchall())
    if len(rows) != len(names):
        return None
    return [decode(rows[name], None) for name in names]


def keep(con: duckdb.DuckDBPyConnection, run_ids: list[str], answers: list[tuple[str, str, Answer]]) -> None:
    """Replace every kept answer of these runs with `answers` (run, query, answer), in the caller's
    transaction."""
    catalog = digest()
    con.execute("DELETE FROM run_answers WHERE list_contains($ids, run_id)", {"ids": run_ids})
    kept = [{"run_id": run_id, "query": name, "catalog": catalog, "answer": encode(a),
             "rows_json": json_rows(a)}
            for run_id, name, a in answers if not a.truncated and a.table.num_rows <= MAX_ROWS]
    if kept:  # one statement: executemany runs one INSERT per answer
        con.execute("INSERT INTO run_answers BY NAME SELECT unnest($kept, recursive := true)", {"kept": kept})
