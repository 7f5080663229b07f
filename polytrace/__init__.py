"""PolyTrace's Python face: `connect()` runs catalog queries from a notebook and returns polars DataFrames."""
from __future__ import annotations

from pathlib import Path
from typing import Any


def default_db() -> str:
    """$POLYTRACE_DB, else ./polytrace.duckdb."""
    from polytrace import settings

    return settings.get().db


class Client:
    """A PolyTrace database opened for analysis, read-only as `polytrace query` opens it, so that
    a notebook left open blocks no other reader; with write=True, the one writer, for ingest."""

    def __init__(self, db: str | Path, write: bool = False):
        from polytrace import store

        self.db = str(db)
        self.write = write
        self.con = store.open(self.db, "w" if write else "r")

    def ingest(self, *paths: str | Path, name: str | None = None, format: str | None = None,
               force: bool = False) -> str:
        from polytrace import service, settings
        from polytrace.ingest.options import IngestOptions
        from polytrace.store import StoreError

        if not self.write:
            raise StoreError(f"{self.db} is open read-only: connect(write=True) to ingest")
        return service.ingest_run(self.con, [Path(p) for p in paths], options=IngestOptions.of(settings.get()),
                                  name=name, format=format, force=force).run_id

    def query(self, name: str, **params: Any):
        """Run catalog query `name` with its parameters; returns a polars DataFrame.

        The same runner, time limit and row cap as the CLI and the REST API
        (POLYTRACE_QUERY_TIMEOUT_MS, POLYTRACE_ROW_CAP)."""
        from polytrace import settings
        from polytrace.queries import render
        from polytrace.queries.catalog import get_query
        from polytrace.queries.runner import Limits, run

        s = settings.get()
        answer = run(self.con, get_query(name), params,
                     Limits(timeout_ms=s.query_timeout_ms, row_cap=s.row_cap))
        return render.polars(answer)

    def runs(self):
        return self.query("runs")

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def connect(db: str | Path | None = None, write: bool = False) -> Client:
    """Open a PolyTrace database (default: $POLYTRACE_DB or ./polytrace.duckdb): read-only, and it
    must exist; with write=True it is created if need be, for `Client.ingest`."""
    return Client(db or default_db(), write)
