"""One input parsed, in a parse worker or in the caller: the units of work of ingest.workers.

Kept apart from load and lake_ingest so that a worker imports the formats but not DuckDB.
"""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa

from polytrace.ingest import registry, sources
from polytrace.ingest.contract import IngestError, Parsed


def now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def parse_input(path: Path, format_name: str, label: str) -> tuple[Parsed, datetime]:
    """Parse one input; errors name it `label`. The format travels by name: formats hold
    functions, which do not pickle."""
    started = now()
    fmt = registry.get(format_name)
    try:
        with sources.reading(path, label):
            return fmt.parse(path), started
    except IngestError as e:
        raise e.about(path, label) from None
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, UnicodeError,
            pa.ArrowException, EOFError, OSError, RecursionError, MemoryError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise IngestError(label, reason) from None


def parse_to_parquet(i: int, path: Path, format_name: str, label: str, staging: Path):
    """Parse one input and write each of its tables to `staging`; the file paths instead of
    the tables, with the rest of what parsing gave."""
    import pyarrow.parquet as pq  # where used: only an ingest into a lake writes Parquet

    parsed, started = parse_input(path, format_name, label)
    tables = {}
    for table, data in parsed.tables.items():
        out = staging / f"{i}-{table}.parquet"
        pq.write_table(data, out)
        tables[table] = out
    return tables, parsed.run, parsed.warnings, parsed.deferred, started
