"""Each run's line in the runs overview, kept in the run_overview table: run_summary's figures and
its findings counted by severity, computed by the catalog whenever the run changes; the answers
of the stored queries, the findings' among them, are kept beside it in run_answers
(queries/answers.py).

A writer calls refresh() after it changes a run (ingest, append, simulate); stale() lists the
runs whose line an older catalog computed, for the next writer to refresh. Reading the
overview is then one small table, on DuckDB, over a lake and on Spark alike.
"""
from __future__ import annotations

import json
from datetime import datetime, timezone

import pyarrow as pa

from polytrace import store
from polytrace.columns import from_list
from polytrace.queries import answers
from polytrace.queries.catalog import Query, View, compose, digest, get_query, load_views
from polytrace.queries.findings import collect, finding_queries
from polytrace.queries.runner import Answer, DuckDB, Limits, having_rows, no_rows, run_each
from polytrace.store import runs

# Each query of a refresh runs within this: a refresh holds the writer (the server's write lock), so
# no query of it may hold it unbounded. Generous: the refresh is off the request path. The row cap
# is the longest answer kept: a longer one is not kept, so it need not be read whole (and a capped
# query is planned once, where an uncapped one streams through a relation planned twice).
REFRESH_LIMITS = Limits(timeout_ms=120_000, row_cap=answers.MAX_ROWS)

# run_overview column <- run_summary column
FROM_SUMMARY = {
    "steps": "steps", "samples": "samples", "gpus": "gpus", "step_s_mean": "mean_step_s",
    "rollout_idle_frac_mean": "rollout_idle_frac_mean", "tail_ratio_max": "tail_ratio_worst",
    "dp_imbalance_mean": "dp_imbalance_mean", "filter_waste_share": "wasted_token_frac",
}


def line(run_id: str, summary: Answer, found: list[dict]) -> dict:
    """The run's overview line, from its run_summary answer and its findings."""
    row = dict(zip(summary.columns, summary.rows[0])) if summary.rows else {}
    out = {"run_id": run_id, **{k: row.get(v) for k, v in FROM_SUMMARY.items()}}
    idle = row.get("gpu_idle_frac_mean")
    out["gpu_idle_pct"] = None if idle is None else 100 * idle
    severities = [f["severity"] for f in found]
    for severity in ("critical", "warn", "info"):
        out[f"findings_{severity}"] = severities.count(severity)
    out["findings"] = json.dumps(found)
    return out


# A run's row in these says what the run is, not what it did.
DESCRIBING = frozenset({"runs", "ingests"})


def silent(query: Query, holding: set[str]) -> bool:
    """Whether `query` has nothing to say of a run whose rows are in the `holding` inputs: none of
    the data inputs it reads holds any. Then it answers no row (tests/test_refresh.py holds the
    catalog to that), except run_summary, which is the run's line whatever the run holds."""
    data = query.inputs - DESCRIBING
    return query.name != "run_summary" and bool(data) and not data & holding


def holding(con, run_id: str, queries: list[Query], limits: Limits = REFRESH_LIMITS) -> set[str]:
    """The inputs that hold a row of the run: the store's tables (one statement), and each probed
    view the queries read that some table under it holds a row for (asked in one more)."""
    params = {"run_id": run_id}
    rows_of = {t: f'SELECT 1 FROM "{t}" WHERE run_id = $run_id' for t in runs.run_tables(con)}
    tables = having_rows(con, rows_of, params, limits)
    views = load_views()
    read = {name for q in queries for name in q.inputs if name in views}
    asked = sorted(name for name in read if _under(name, views) & tables)
    probes = {name: compose(f"SELECT 1 FROM {name}", views)[0] for name in asked}
    return tables | having_rows(con, probes, params, limits)


def _under(name: str, views: dict[str, View]) -> frozenset[str]:
    """The store's tables a view reads, through every view it reads."""
    return frozenset().union(*(_under(i, views) if i in views else {i} for i in views[name].inputs))


def computed(con, run_id: str, limits: Limits = REFRESH_LIMITS) -> dict[str, Answer]:
    """The run's answer to every query its line, its findings and its stored answers need: each
    that has something to say run once within `limits` (QueryTimeout past them), several at once
    (runner.run_each), the others' empty answers made without planning them."""
    needed = {q.name: q for q in [get_query("run_summary"), *finding_queries(), *answers.stored_queries()]}
    held = holding(con, run_id, list(needed.values()), limits)
    quiet = {name for name, q in needed.items() if silent(q, held)}
    said = run_each(con, [q for name, q in needed.items() if name not in quiet], {"run_id": run_id}, limits)
    answered = no_rows(con, [needed[name] for name in quiet]) | said
    return {name: answered[name] for name in needed}


def refresh(con, run_ids: list[str], limits: Limits = REFRESH_LIMITS) -> None:
    """Recompute these runs' overview lines and stored answers (those runs that exist), in one
    transaction of the caller's connection; each query within `limits` (QueryTimeout past them)."""
    keep(con, run_ids, summed(con, run_ids, limits))


def summed(con, run_ids: list[str], limits: Limits = REFRESH_LIMITS) -> tuple[list[dict], list[tuple]]:
    """These runs' overview lines and stored answers (run, query, answer), computed (only reads):
    what `keep` writes."""
    known = {r[0] for r in con.execute("SELECT run_id FROM runs WHERE list_contains($ids, run_id)",
                                       {"ids": run_ids}).fetchall()}
    lines, kept = [], []
    for run_id in (r for r in run_ids if r in known):
        got = computed(con, run_id, limits)
        lines.append(line(run_id, got["run_summary"], collect(got[q.name] for q in finding_queries())))
        kept += [(run_id, q.name, got[q.name]) for q in answers.stored_queries()]
    return lines, kept


def keep(con, run_ids: list[str], sums: tuple[list[dict], list[tuple]]) -> None:
    """Replace these runs' overview lines and stored answers with `sums` (summed), in one transaction."""
    lines, kept = sums
    if not lines:
        return
    catalog, now = digest(), datetime.now(timezone.utc).replace(tzinfo=None)
    lines = [{**x, "catalog": catalog, "refreshed_at": now} for x in lines]
    # typed as the table is, column by column (Table.from_pylist would import pandas, 0.2 s)
    schema = DuckDB(con).arrow("SELECT * FROM run_overview LIMIT 0", {}, 0)[0].schema
    table = pa.table({f.name: from_list([x[f.name] for x in lines], f.type) for f in schema})
    with store.transaction(con), store.registered(con, "_overview", table):
        con.execute("DELETE FROM run_overview WHERE list_contains($ids, run_id)", {"ids": run_ids})
        con.execute("INSERT INTO run_overview BY NAME SELECT * FROM _overview")
        answers.keep(con, run_ids, kept)


def stale(con) -> list[str]:
    """Runs without an overview line and findings list from the current catalog: a run changed
    since its last refresh, or summed up before its findings were kept."""
    return [r[0] for r in con.execute(
        "SELECT r.run_id FROM runs r LEFT JOIN run_overview o USING (run_id) "
        "WHERE o.catalog IS DISTINCT FROM $digest OR o.findings IS NULL ORDER BY r.run_id",
        {"digest": digest()}).fetchall()]
