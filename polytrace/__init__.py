"""PolyTrace's Python face: `connect()` runs catalog queries from a notebook and returns polars DataFrames."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

DEFAULT_DB = "polytrace.duckdb"


def default_db() -> str:
    return os.environ.get("POLYTRACE_DB", DEFAULT_DB)


class Client:
    """A PolyTrace database opened for analysis."""

    def __init__(self, db: str | Path):
        from polytrace.ingest.load import open_db

        self.db = str(db)
        self.con = open_db(self.db)

    def ingest(self, *paths: str | Path, name: str | None = None, format: str | None = None,
               force: bool = False) -> str:
        from polytrace.ingest.load import ingest_paths

        return ingest_paths(self.con, [Path(p) for p in paths], name=name, format=format,
                            force=force).run_id

    def query(self, name: str, **params: Any):
        """Run catalog query `name` with its parameters; returns a polars DataFrame."""
        import polars as pl
        from polytrace.queries.catalog import bind, get_query

        q = get_query(name)
        return pl.from_arrow(self.con.execute(q.sql, bind(q, params)).to_arrow_table())

    def runs(self):
        return self.query("runs")

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def connect(db: str | Path | None = None) -> Client:
    """Open a PolyTrace database (default: $POLYTRACE_DB or ./polytrace.duckdb)."""
    return Client(db or default_db())
