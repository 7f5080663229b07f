"""The storage layer below ingest, queries and server: the versioned schema, the aggregates,
connections with their read-only policy, transactions and the Parquet lake layout.
Nothing here knows a trace format or an HTTP request."""
from polytrace.store.connection import (  # noqa: A004
    bound,
    open,
    read_snapshot,
    registered,
    time_limit,
    transaction,
)
from polytrace.store.errors import StoreError, Timeout

__all__ = ["bound", "open", "read_snapshot", "registered", "time_limit", "transaction", "StoreError", "Timeout"]
