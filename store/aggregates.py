"""Per-step aggregates: one documented `CREATE TABLE … AS SELECT` file each, filled per run at ingest.

Each table is exactly its SELECT for one run ($run_id), so dashboard queries read a few
rows per step instead of scanning every sample; `on_the_fly()` swaps the SELECTs back in
to check or time them against the raw tables.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

import duckdb

from polytrace.store import vocabulary

_CREATE = re.compile(r"^CREATE TABLE (\w+) AS\s*$", re.MULTILINE)
_COLUMN = re.compile(r"^-- @column (\w+) (\w+)\s")


@dataclass(frozen=True)
class Aggregate:
    name: str
    doc: str
    columns: tuple[tuple[str, str], ...]  # (name, DuckDB type) as the header declares them
    select: str                           # the SELECT, reading $run_id

    @property
    def per_step(self) -> bool:
        return any(name == "step" for name, _ in self.columns)

    @property
    def create_sql(self) -> str:
        return f"CREATE TABLE IF NOT EXISTS {self.name} AS\n{self.select}\nWITH NO DATA"


def parse(name: str, text: str) -> Aggregate:
    m = _CREATE.search(text)
    if not m or m.group(1) != name:
        raise ValueError(f"store/aggregates/{name}.sql must hold `CREATE TABLE {name} AS` on a line of its own")
    header = text[:m.start()].splitlines()
    columns = tuple((c.group(1), c.group(2)) for line in header if (c := _COLUMN.match(line)))
    doc = " ".join(line[2:].strip() for line in header
                   if line.startswith("--") and not line.startswith("-- @"))
    return Aggregate(name, doc, columns, text[m.end():].strip())


@lru_cache(maxsize=1)
def _load() -> tuple[Aggregate, ...]:
    folder = resources.files("polytrace.store").joinpath("aggregates")
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)
    return tuple(parse(f.name[:-4], f.read_text()) for f in files)


def aggregates() -> tuple[Aggregate, ...]:
    return _load()


def names() -> tuple[str, ...]:
    return tuple(a.name for a in _load())


def digest() -> str:
    """Changes whenever an aggregate's definition or the metric vocabulary does: stored databases
    then recompute."""
    h = hashlib.sha256(vocabulary.digest().encode())
    for a in _load():
        h.update(f"{a.name}\0{a.select}\0".encode())
    return h.hexdigest()[:16]


def create(con: duckdb.DuckDBPyConnection) -> None:
    for a in _load():
        con.execute(a.create_sql, {"run_id": None})


def drop(con: duckdb.DuckDBPyConnection) -> None:
    for a in _load():
        con.execute(f"DROP TABLE IF EXISTS {a.name}")


def materialize(con: duckdb.DuckDBPyConnection, run_id: str, steps: list[int] | None = None) -> None:
    """(Re)compute every aggregate table for one run, inside the caller's transaction.

    With `steps`, only those steps' rows of the per-step aggregates (a live append): their
    filter on the group key reaches the scans, so a step costs the same in a long run as in a
    short one.
    """
    for a in _load():
        if steps is None or not a.per_step:
            con.execute(f"DELETE FROM {a.name} WHERE run_id = $run_id", {"run_id": run_id})
            con.execute(f"INSERT INTO {a.name} BY NAME {a.select}", {"run_id": run_id})
            continue
        params = {"run_id": run_id, "steps": steps}
        con.execute(f"DELETE FROM {a.name} WHERE run_id = $run_id AND list_contains($steps, step)", params)
        con.execute(f"INSERT INTO {a.name} BY NAME SELECT * FROM ({a.select}) "
                    "WHERE list_contains($steps, step)", params)


def on_the_fly(sql: str) -> str:
    """The same catalog SQL with every aggregate table computed from the raw tables.

    Only for queries bound to one `$run_id`: the aggregates read that parameter.
    """
    ctes = ",\n".join(f"{a.name} AS ({a.select})" for a in _load())
    own = re.match(r"\s*WITH\s", sql, re.IGNORECASE)
    if own:
        return f"WITH {ctes},\n{sql[own.end():]}"
    return f"WITH {ctes}\n{sql}"
