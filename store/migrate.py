"""The schema's version: a writer brings an older database up to date on open; a reader says how.

`schema_version` counts changes that need statements of their own (MIGRATIONS: an ALTER, a
backfill). `schema` is a digest of schema.sql, whose statements are all IF NOT EXISTS: a new
table or view is applied by the next writer. `aggregates` is a digest of the aggregate
definitions and of the metric vocabulary (store/vocabulary/*.toml): a changed definition or
mapping recomputes every run's aggregates. The digests catch a
change even when nobody remembered to bump a number.
"""
from __future__ import annotations

import hashlib
from importlib import resources

import duckdb

from polytrace.store import aggregates, vocabulary
from polytrace.store.errors import StoreError

SCHEMA_VERSION = 11
# version -> statements that bring a database of version - 1 to it. Version 1 is every
# database written before the version was recorded; its tables are a subset of today's,
# so schema.sql (all IF NOT EXISTS) brings it up to date. Version 3 adds runs.length_unit;
# version 4 drops run_findings, the findings list now read from the stored answers; version 5
# drops run_answers for schema.sql to create it anew with its answers uncompressed (DuckDB
# cannot alter a column's compression), and the runs are summed up again
# (queries.overview.stale) by the next `polytrace serve` or `polytrace migrate`. Version 6 adds
# gpu_events.trace_start_us (NULL for the events already loaded: one trace file per rank, as
# before). Version 7 adds the async run facts runs.trainer_gpus, rollout_gpus and max_staleness.
# Version 8 gives ingests a warnings column: a loaded file's warnings move there from error,
# which keeps only a failed file's reason; and live_files a tail (a log's last committed bytes).
# Version 9 gives gpu_ranks each file's clock and its origin (NULL for ranks loaded before: their
# clocks are unknown, and the ranks of such a run are compared unshifted, as before). Version 10
# keeps each run's findings list in run_overview.findings, read without Arrow; NULL makes the
# line stale, so the next writer fills it. Version 11 keeps each answer's JSON rows too: run_answers
# is made anew (as in version 5) and every run's line made stale, so the next writer keeps them.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    2: (),
    3: ("ALTER TABLE runs ADD COLUMN IF NOT EXISTS length_unit VARCHAR",),
    4: ("DROP TABLE IF EXISTS run_findings",),
    5: ("DROP TABLE IF EXISTS run_answers",),
    6: ("ALTER TABLE gpu_events ADD COLUMN IF NOT EXISTS trace_start_us DOUBLE",),
    7: ("ALTER TABLE runs ADD COLUMN IF NOT EXISTS trainer_gpus INTEGER",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS rollout_gpus INTEGER",
        "ALTER TABLE runs ADD COLUMN IF NOT EXISTS max_staleness INTEGER"),
    8: ("ALTER TABLE ingests ADD COLUMN IF NOT EXISTS warnings VARCHAR",
        "UPDATE ingests SET warnings = error, error = NULL WHERE status = 'ok' AND error IS NOT NULL",
        "ALTER TABLE live_files ADD COLUMN IF NOT EXISTS tail BLOB"),
    9: ("ALTER TABLE gpu_ranks ADD COLUMN IF NOT EXISTS clock VARCHAR",
        "ALTER TABLE gpu_ranks ADD COLUMN IF NOT EXISTS clock_origin_ns BIGINT"),
    10: ("ALTER TABLE run_overview ADD COLUMN IF NOT EXISTS findings VARCHAR",),
    11: ("DROP TABLE IF EXISTS run_answers", "UPDATE run_overview SET findings = NULL"),
}
# Derived tables an older schema had: a lake exported then still holds them, and a restore
# leaves them out without a word.
RETIRED_TABLES = ("run_findings",)
UPGRADE_HINT = "upgrade it with `polytrace migrate --db {path}` (or open it once with `polytrace serve`)"


def schema_sql() -> str:
    return resources.files("polytrace.store").joinpath("schema.sql").read_text()


def views_sql() -> str:
    """The views, created after the tables and the aggregates they read."""
    return resources.files("polytrace.store").joinpath("views.sql").read_text()


def schema_digest() -> str:
    return hashlib.sha256((schema_sql() + views_sql()).encode()).hexdigest()[:16]


def _meta(con: duckdb.DuckDBPyConnection) -> dict[str, str] | None:
    """The database's recorded versions; None when it has no PolyTrace schema at all."""
    tables = {r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'main'").fetchall()}
    if "runs" not in tables:
        return None
    if "store_meta" not in tables:
        return {"schema_version": "1"}
    return dict(con.execute("SELECT key, value FROM store_meta").fetchall())


def problem(con: duckdb.DuckDBPyConnection) -> str | None:
    """Why a reader cannot use this database as it is, or None."""
    try:  # a current database answers in one lookup, without a scan of the catalog's tables
        meta = dict(con.execute("SELECT key, value FROM store_meta").fetchall())
    except duckdb.CatalogException:
        meta = _meta(con)
    if meta is None:
        return "not a PolyTrace database (no runs table)"
    version = int(meta.get("schema_version", "1"))
    if version > SCHEMA_VERSION:
        return (f"written by a newer PolyTrace (schema {version}; this one reads {SCHEMA_VERSION}): "
                "upgrade PolyTrace")
    if version < SCHEMA_VERSION:
        return (f"written by an older PolyTrace (schema {version}, this one reads {SCHEMA_VERSION}); "
                + UPGRADE_HINT.format(path=_path(con)))
    if meta.get("aggregates") != aggregates.digest() or meta.get("schema") != schema_digest():
        return ("its tables or per-step aggregates were written by another PolyTrace build than this "
                "one; " + UPGRADE_HINT.format(path=_path(con)))
    return None


def _path(con) -> str:
    rows = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchall()
    return rows[0][0] if rows and rows[0][0] else "FILE"


def ensure(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Create or upgrade the schema in place; returns the runs whose aggregates were recomputed."""
    meta = _meta(con) or {}
    version = int(meta.get("schema_version", SCHEMA_VERSION if not meta else 1))
    if version > SCHEMA_VERSION:
        raise StoreError(f"this database was written by a newer PolyTrace (schema {version}; "
                         f"this one reads {SCHEMA_VERSION}): upgrade PolyTrace")
    if meta == _current():
        return []  # nothing to write: a writer opens a current database on a full disk
    con.execute(schema_sql())
    upgrades = range(version + 1, SCHEMA_VERSION + 1)
    for v in upgrades:
        for statement in MIGRATIONS[v]:
            con.execute(statement)
    if upgrades:
        con.execute(schema_sql())  # what a migration dropped, created anew
    recompute = bool(meta) and meta.get("aggregates") != aggregates.digest()
    if recompute:
        aggregates.drop(con)
    if meta.get("vocabulary") != vocabulary.digest():
        vocabulary.fill(con)
    aggregates.create(con)
    con.execute(views_sql())
    runs = _recompute_all(con) if recompute else []
    con.execute("INSERT OR REPLACE INTO store_meta VALUES ('schema_version', ?), ('schema', ?), "
                "('aggregates', ?), ('vocabulary', ?)",
                [str(SCHEMA_VERSION), schema_digest(), aggregates.digest(), vocabulary.digest()])
    return runs


def _current() -> dict[str, str]:
    """store_meta as this PolyTrace writes it."""
    return {"schema_version": str(SCHEMA_VERSION), "schema": schema_digest(), "aggregates": aggregates.digest(),
            "vocabulary": vocabulary.digest()}


def _recompute_all(con) -> list[str]:
    runs = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()]
    con.execute("BEGIN TRANSACTION")
    try:
        for run_id in runs:
            aggregates.materialize(con, run_id)
        con.execute("DELETE FROM run_answers")  # they were computed from the old aggregates
        con.execute("UPDATE run_overview SET findings = NULL")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return runs
