"""A Parquet lake written by `polytrace export`: a directory of `table=<name>/run_id=<id>/` partitions."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pyarrow as pa

from polytrace.ingest.contract import Format, IngestError, Parsed, Sample

# polytrace.store, and DuckDB with it, is imported where used: parse workers import every format
# and need neither (ingest/parsing.py).


def parse(path: Path) -> Parsed:
    """Every run of the lake, to be restored as it was: the tables stream from disk."""
    from polytrace.store.lake import lake_dataset, lake_tables, partitions

    if not path.is_dir():
        raise IngestError(path, "a Parquet lake is a directory (table=<name>/run_id=<id>/part-0.parquet), "
                                "not a file: give the lake's folder, or upload its files with their paths")
    tables = lake_tables(path)
    if "runs" not in tables:
        raise IngestError(path, "Parquet lake without a table=runs directory")
    runs = _read_runs(path, tables["runs"])
    known = {r["run_id"] for r in runs}
    parsed = Parsed(runs=runs)
    for table, table_dir in tables.items():
        parts = partitions(table_dir)
        orphans = sorted(set(parts) - known)
        if orphans:
            raise IngestError(path, f"table={table} holds run_id={orphans[0]} "
                                    "that has no row in table=runs")
        for part in parts.values():
            _check_files(path, part)
        parsed.tables[table] = lake_dataset(table_dir)
    return parsed


def _read_runs(lake: Path, runs_dir: Path) -> list[dict]:
    from polytrace.store.lake import partitions

    parts = partitions(runs_dir)
    if not parts:
        raise IngestError(lake, "Parquet lake holds no run")
    runs = []
    for run_id, part in parts.items():
        try:
            rows = _read_parquet(lake, part).to_pylist()
        except ValueError as e:  # a text cell that is not UTF-8
            raise IngestError(lake, f"table=runs/run_id={run_id}: unreadable ({e})") from None
        if len(rows) != 1:
            raise IngestError(lake, f"table=runs/run_id={run_id} holds {len(rows)} rows, not 1")
        runs.append({**rows[0], "run_id": run_id})
    return runs


def _check_files(lake: Path, part: Path) -> None:
    files = [f for f in part.iterdir() if f.is_file() and f.suffix == ".parquet"]
    if not files:
        raise IngestError(lake, f"{part.parent.name}/{part.name} holds no Parquet file")
    for f in files:
        _read_parquet(lake, f, schema_only=True)


def _read_parquet(lake: Path, path: Path, schema_only: bool = False):
    """A lake file's table, or only its schema; IngestError names the file when it is unreadable."""
    import pyarrow.parquet as pq  # where used: it is not needed to start up

    try:
        return pq.read_schema(path) if schema_only else pq.read_table(path)
    except (pa.ArrowException, OSError, ValueError) as e:  # ValueError: metadata that is not UTF-8
        raise IngestError(lake, f"{path.relative_to(lake)}: not a readable Parquet file "
                                f"({str(e).splitlines()[0]})") from None


def sample() -> Sample:
    """The lake `polytrace export` writes for a run of four samples over two dp ranks."""
    from polytrace import store
    from polytrace.store.lake import export_runs

    run_id = "0a1b2c3d4e5f"
    con = store.open(":memory:")
    try:
        con.execute("INSERT INTO runs (run_id, name, format, sha256) "
                    "VALUES (?, 'tiny', 'samples-table', 'feed')", [run_id])
        con.executemany("INSERT INTO samples (run_id, step, prompt_id, sample_id, dp_rank, prompt_len, "
                        "response_len) VALUES (?, 0, ?, ?, ?, ?, ?)",
                        [[run_id, p, s, p, 10 * (p + 1), 4 * p + 2 * s + 1] for p in (0, 1) for s in (0, 1)])
        with tempfile.TemporaryDirectory() as tmp:
            export_runs(con, [run_id], Path(tmp))
            files = {f"lake/{p.relative_to(tmp).as_posix()}": p.read_bytes()
                     for p in sorted(Path(tmp).rglob("*")) if p.is_file()}
    finally:
        con.close()
    return Sample(files, ("lake",))


def claims(path: Path) -> bool:
    from polytrace.store.lake import is_lake

    return is_lake(path)


FORMAT = Format(
    name="parquet-lake",
    priority=50,
    sniff=lambda head, name: False,
    parse=parse,
    sample=sample,
    claims_directory=claims,
    description="a Parquet lake from `polytrace export`: table=<name>/run_id=<id>/part-0.parquet",
)
