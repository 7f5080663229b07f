"""The lake in object storage: `s3://bucket/prefix`, on S3 or any S3-compatible store (MinIO, Ceph,
GCS through its S3 API), through pyarrow's S3 filesystem, which PolyTrace already depends on and
which DuckDB scans as Arrow datasets (its httpfs extension cannot be installed offline).

An object store has no rename, so a run is published by a commit object, not a folder rename:

    <prefix>/data/table=<name>/run_id=<id>/<digest>.parquet   each table's rows of the run
    <prefix>/commits/<id>.json                                 {"run_id", "digest", "sha256", "tables", "sizes"}

A publisher uploads the data files first (each object appears whole, when its upload completes),
then writes the commit, one PUT. Readers list commits/ and read the files that each names, so a
run appears whole or not at all; data files no commit names (a publisher killed halfway, a run
published again) are invisible, and `polytrace lake vacuum` deletes them after a grace period.
`digest` is the hash of the run's files: publishing a run again with the same content writes the
same objects (idempotent); with new content, its commit moves to the new files at once. `sizes`
(bytes of each table's file) spares a reader a HEAD request before each file it reads; a commit
written before it had them is read without.

    <prefix>/compact/<id>/table=<name>.parquet                 every covered run's rows of a table
    <prefix>/index.json                                        {"id", "runs": {id: {digest, sha256, listed}}, "files"}

`lake compact` writes these so that a lake of thousands of runs opens with one listing, one index
and a file per table: a commit whose listed (modified time, size) the index recorded is covered
without being read; a run published again since is read from its own files.

Endpoint, region and credentials come from the AWS SDK's own chain (AWS_ACCESS_KEY_ID /
AWS_SECRET_ACCESS_KEY, AWS_PROFILE and ~/.aws, instance roles), AWS_ENDPOINT_URL and AWS_REGION:
never from the URL, which may name only a bucket and a prefix.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa

from polytrace.store.errors import StoreError
from polytrace.store.lake import (PART_FILE, ForeignFiles, canonical_schema, canonical_select, export_runs,
                                  lake_connection, lake_tables, locked, partition_dir, replace_with_view)
from polytrace.store.runs import RUN_ID

SCHEME = "s3://"
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_DIGEST = re.compile(r"[0-9a-f]{16,64}")
CHUNK = 1 << 20
RUN_ID_COLUMN = "run_id"  # the partition key of every table's files
# commits are read in parallel: each is one small GET
READERS = 16
INDEX = "index.json"
# a compacted file's row groups: whole ones (see row_groups), each held in memory once
ROW_GROUP_ROWS, ROW_GROUP_BYTES = 1 << 17, 64 << 20
MAX_SMALL_OBJECT = 64 << 20  # a commit or the index (a 10,000-run index is ~1.5 MB)


@dataclass(frozen=True)
class Location:
    bucket: str
    prefix: str

    def key(self, *parts: str) -> str:
        """A pyarrow S3 path: bucket/prefix/parts..."""
        return "/".join(p for p in (self.bucket, self.prefix, *parts) if p)

    def __str__(self) -> str:
        return SCHEME + self.key()


def location(url: str) -> Location:
    """The bucket and prefix of `s3://bucket/prefix`; a one-line StoreError for anything else."""
    if not url.startswith(SCHEME):
        raise StoreError(f"not an s3:// URL: {url[:80]!r}")
    bucket, _, prefix = url[len(SCHEME):].partition("/")
    if "@" in bucket or ":" in bucket:
        # the part before @ would be a key pair: name neither back
        raise StoreError("an s3:// URL names a bucket and a prefix only; give credentials through "
                         "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE or ~/.aws")
    if not _BUCKET.fullmatch(bucket):
        raise StoreError(f"{url[:80]!r}: {bucket[:64]!r} is not an S3 bucket name")
    parts = [p for p in prefix.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise StoreError(f"{url[:80]!r}: a prefix may not hold . or .. segments")
    return Location(bucket, "/".join(parts))


def filesystem():
    """pyarrow's S3 filesystem with the environment's endpoint and region (credentials: the SDK's chain)."""
    from pyarrow.fs import S3FileSystem

    # delayed open: an object smaller than one part goes up in one PUT, not a three-request
    # multipart upload (a run's commit and most of its data files are a few kB)
    options = {"connect_timeout": 10, "request_timeout": 60, "allow_delayed_open": True}
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        options["endpoint_override"] = endpoint
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:
        options["region"] = region
    return S3FileSystem(**options)


def _secrets() -> list[str]:
    return [v for k in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID")
            if len(v := os.environ.get(k, "")) >= 4]


def failure(where: Location | str, e: Exception) -> StoreError:
    """A storage error in one line, with any credential the environment holds blanked out."""
    text = (str(e).splitlines() or [type(e).__name__])[0]
    for secret in _secrets():
        text = text.replace(secret, "***")
    return StoreError(f"{where}: {text}")


# ---- writing -----------------------------------------------------------------------------------

def export_to(con: duckdb.DuckDBPyConnection, run_ids: list[str], url: str) -> dict[str, int]:
    """Publish these runs of a database into the lake at url; rows written per table."""
    where = location(url)
    staging = Path(tempfile.mkdtemp(prefix="polytrace-export-"))
    try:
        rows = export_runs(con, run_ids, staging)
        publish(staging, run_ids, where)
        return rows
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def publish(local_lake: Path, run_ids: list[str], where: Location) -> None:
    """Upload each run's partitions from a local lake, then its commit."""
    fs = filesystem()
    tables = list(lake_tables(local_lake))
    for run_id in run_ids:
        files = {t: partition_dir(local_lake, t, run_id) / PART_FILE for t in tables}
        # a table without rows of the run is left out: the canonical table is empty without it
        files = {t: f for t, f in files.items() if f.is_file() and (t == "runs" or _rows(f))}
        digest = _digest(files)
        try:
            for table, file in files.items():
                _upload(fs, file, where.key("data", f"table={table}", f"run_id={run_id}", f"{digest}.parquet"))
            commit = {"run_id": run_id, "digest": digest, "sha256": _input_sha256(files["runs"]),
                      "tables": sorted(files), "sizes": {t: f.stat().st_size for t, f in sorted(files.items())}}
            with fs.open_output_stream(where.key("commits", f"{run_id}.json")) as out:
                out.write(json.dumps(commit).encode())
        except OSError as e:
            raise failure(where, e) from None


def _rows(file: Path) -> int:
    import pyarrow.parquet as pq

    return pq.ParquetFile(file).metadata.num_rows


def _digest(files: dict[str, Path]) -> str:
    h = hashlib.sha256()
    for table in sorted(files):
        with open(files[table], "rb") as f:
            h.update(table.encode() + b"\0" + hashlib.file_digest(f, "sha256").digest())
    return h.hexdigest()[:32]


def _upload(fs, file: Path, key: str) -> None:
    with open(file, "rb") as src, fs.open_output_stream(key) as out:
        while chunk := src.read(CHUNK):
            out.write(chunk)


def _input_sha256(runs_file: Path) -> str | None:
    import pyarrow.parquet as pq

    values = pq.read_table(runs_file, columns=["sha256"]).column("sha256").to_pylist()
    return values[0] if values else None


# ---- reading -----------------------------------------------------------------------------------

@dataclass
class Snapshot:
    """What a reader reads: the compacted files of the index (its runs whose commit is still the
    one it covered) and the commits it does not cover, each read once."""

    index: dict | None
    covered: list[str]   # runs read from the index's files
    commits: list[dict]  # the rest, read from their own files
    listed: dict[str, tuple[int, int]] = field(default_factory=dict)  # run_id -> (commit mtime, size)

    @property
    def runs(self) -> int:
        return len(self.covered) + len(self.commits)

    @property
    def uncovered_in_index(self) -> list[str]:
        """Runs the index holds but no longer covers: published again, or their commit gone."""
        covered = set(self.covered)
        return sorted(r for r in (self.index or {}).get("runs", {}) if r not in covered)


def snapshot(where: Location, fs=None) -> Snapshot:
    """The lake as published now. A commit whose (modified time, size) the index recorded is
    covered without reading it; any other is read, and covered only if the index holds its digest."""
    from pyarrow.fs import FileSelector, FileType

    fs = fs or filesystem()
    try:
        infos = fs.get_file_info(FileSelector(where.key("commits"), allow_not_found=True))
        listed = {i.base_name.removesuffix(".json"): (i.mtime_ns or 0, i.size or 0) for i in infos
                  if i.type == FileType.File and i.base_name.endswith(".json")}
        index = _index(where, fs)
        indexed = (index or {}).get("runs", {})
        unsure = sorted(r for r, seen in listed.items()
                        if r not in indexed or tuple(indexed[r]["listed"]) != seen)
        with ThreadPoolExecutor(READERS) as pool:
            bodies = list(pool.map(lambda r: _read(fs, where.key("commits", f"{r}.json")), unsure))
    except OSError as e:
        raise failure(where, e) from None
    found = [_checked(where, f"{r}.json", body) for r, body in zip(unsure, bodies)]
    own = [c for c in found if indexed.get(c["run_id"], {}).get("digest") != c["digest"]]
    mine = {c["run_id"] for c in own}
    covered = sorted(r for r in listed if r in indexed and r not in mine)
    return Snapshot(index if covered else None, covered, own, listed)


def _read(fs, key: str) -> bytes:
    with fs.open_input_stream(key) as f:
        return f.read(MAX_SMALL_OBJECT)


def _index(where: Location, fs) -> dict | None:
    """The compaction index, checked; None when the lake has none."""
    try:
        body = _read(fs, where.key(INDEX))
    except FileNotFoundError:
        return None
    try:
        index = json.loads(body)
    except ValueError:
        raise StoreError(f"{where}: {INDEX} is not JSON") from None
    runs, files = (index.get("runs"), index.get("files")) if isinstance(index, dict) else (None, None)
    if not (isinstance(runs, dict) and isinstance(files, dict) and _DIGEST.fullmatch(str(index.get("id")))
            and all(isinstance(r, str) and RUN_ID.match(r) and isinstance(v, dict)
                    and _DIGEST.fullmatch(str(v.get("digest"))) and isinstance(v.get("listed"), list)
                    for r, v in runs.items())
            and all(isinstance(t, str) and f == _compact_key(where, index["id"], t) for t, f in files.items())):
        raise StoreError(f"{where}: {INDEX} is not a PolyTrace index (id, runs, files)")
    return index


def _checked(where: Location, name: str, body: bytes) -> dict:
    try:
        commit = json.loads(body)
    except ValueError:
        raise StoreError(f"{where}: commits/{name} is not JSON") from None
    known = canonical_schema()[0]
    if not (isinstance(commit, dict) and isinstance(commit.get("run_id"), str) and RUN_ID.match(commit["run_id"])
            and commit["run_id"] + ".json" == name and isinstance(commit.get("digest"), str)
            and _DIGEST.fullmatch(commit["digest"]) and isinstance(commit.get("tables"), list)
            and "runs" in commit["tables"] and all(isinstance(t, str) for t in commit["tables"])):
        raise StoreError(f"{where}: commits/{name} is not a PolyTrace commit (run_id, digest, tables)")
    commit["tables"] = [t for t in commit["tables"] if t in known]
    sizes = commit.get("sizes")
    if not (isinstance(sizes, dict) and all(isinstance(sizes.get(t), int) and sizes[t] > 0 for t in commit["tables"])):
        commit.pop("sizes", None)  # read without: each file's size is asked for first
    return commit


def commits(where: Location, fs=None) -> list[dict]:
    """Every published run's commit, checked, in run id order (each one read)."""
    fs = fs or filesystem()
    try:
        infos = fs.get_file_info(_commit_selector(where))
        names = sorted(i.base_name for i in infos if i.base_name.endswith(".json"))
        with ThreadPoolExecutor(READERS) as pool:
            bodies = list(pool.map(lambda n: _read(fs, where.key("commits", n)), names))
    except OSError as e:
        raise failure(where, e) from None
    return [_checked(where, n, body) for n, body in zip(names, bodies)]


def _commit_selector(where: Location):
    from pyarrow.fs import FileSelector

    return FileSelector(where.key("commits"), allow_not_found=True)


def data_keys(where: Location, commit: dict, table: str) -> str:
    return where.key("data", f"table={table}", f"run_id={commit['run_id']}", f"{commit['digest']}.parquet")


def _compact_key(where: Location, index_id: str, table: str) -> str:
    return where.key("compact", index_id, f"table={table}.parquet")


def lake_state(url: str) -> tuple:
    """Changes whenever a run is published, published again or removed: its commit changes."""
    where = location(url)
    try:
        infos = filesystem().get_file_info(_commit_selector(where))
    except OSError:  # unreachable for now: a change, so the next poll looks again
        return ()
    return tuple(sorted((i.path, i.mtime_ns, i.size) for i in infos))


def open_lake(url: str, memory_limit: int | None = None, threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory connection whose canonical tables are views of the lake's published runs."""
    return opened(url, memory_limit, threads)[0]


def opened(url: str, memory_limit: int | None = None,
           threads: int | None = None) -> tuple[duckdb.DuckDBPyConnection, dict[str, object]]:
    """open_lake's connection, and the Arrow datasets its views scan by name. A dataset is
    registered on one connection: each cursor of it must register them too (server/db.py)."""
    con, sources, _ = _opened(location(url))
    return locked(con, memory_limit, threads), sources


def _opened(where: Location) -> tuple[duckdb.DuckDBPyConnection, dict[str, object], Snapshot]:
    fs = filesystem()
    seen = snapshot(where, fs)
    if not seen.runs:
        raise StoreError(f"{where} holds no published run (publish one with `polytrace export --out {where}` "
                         f"or `polytrace ingest --lake {where}`)")
    con = lake_connection()
    try:
        sources = attach_runs(con, where, fs, seen, generation=0)
    except BaseException:
        con.close()
        raise
    return con, sources, seen


def attach_runs(con, where: Location, fs, seen: Snapshot, generation: int) -> dict[str, object]:
    """Each table's view over the index's file of it (its covered runs) and the files of the other
    commits, as Arrow datasets DuckDB scans; the datasets by the names the views read. Datasets get
    a name per generation: a view replaced while a query reads the last one leaves that query its own."""
    import pyarrow.dataset as ds

    sources = {}
    for table, columns in canonical_schema()[0].items():
        parts = []
        published = [c for c in seen.commits if table in c["tables"]]
        try:
            if published:
                parts.append((f"_lake_{table}_{generation}", _runs_dataset(where, fs, table, published), None))
            if seen.index and table in seen.index["files"]:
                parts.append((f"_lake_{table}_compact_{generation}", ds.dataset(
                    seen.index["files"][table], filesystem=fs, format="parquet"), seen.uncovered_in_index))
            for source, dataset, _ in parts:
                con.register(source, dataset)
                sources[source] = dataset
            if parts:
                replace_with_view(con, table, " UNION ALL ".join(
                    _only(canonical_select(con, columns, source), runs) for source, _, runs in parts))
        except (duckdb.Error, ForeignFiles, OSError, pa.ArrowException) as e:
            raise failure(f"{where}: table={table}", e) from None
    return sources


def _runs_dataset(where: Location, fs, table: str, published: list[dict]):
    """The runs' files of one table as one dataset, run_id from each file's partition; with the
    commits' sizes, a file is read without first asking its size (a HEAD request each)."""
    import pyarrow.dataset as ds

    keys = [data_keys(where, c, table) for c in published]
    if not all("sizes" in c for c in published):
        partitioning = ds.partitioning(pa.schema([(RUN_ID_COLUMN, pa.string())]), flavor="hive")
        return ds.dataset(keys, filesystem=fs, format="parquet", partitioning=partitioning,
                          partition_base_dir=where.key("data", f"table={table}"))
    parquet = ds.ParquetFileFormat()
    fragments = [parquet.make_fragment(key, filesystem=fs, file_size=c["sizes"][table],
                                       partition_expression=ds.field(RUN_ID_COLUMN) == c["run_id"])
                 for key, c in zip(keys, published)]
    schema = fragments[0].physical_schema.append(pa.field(RUN_ID_COLUMN, pa.string()))
    return ds.FileSystemDataset(fragments, schema, parquet, fs)


def _only(select: str, dropped: list[str] | None) -> str:
    """A compacted file's rows without the runs it no longer covers (a run published again since
    is read from its new files instead)."""
    if not dropped:
        return select
    listed = ", ".join("'" + r.replace("'", "''") + "'" for r in dropped)
    return f"SELECT * FROM ({select}) WHERE run_id NOT IN ({listed})"


def follow(con, url: str, generation: int) -> dict[str, object]:
    """Point the views at the runs published now (a server over the lake, on a change); the
    datasets they read now."""
    where = location(url)
    fs = filesystem()
    return attach_runs(con, where, fs, snapshot(where, fs), generation)


# ---- compaction --------------------------------------------------------------------------------

def compact(url: str) -> Snapshot:
    """Every table's rows of every published run into one file per table under a new compact/<id>/,
    then the index that names them and the commits they cover (one PUT): a lake of any number of
    runs then opens with one listing and a file per table. Runs published meanwhile stay read
    from their own files; the runs' own files stay (vacuum keeps what a commit names)."""
    import pyarrow.parquet as pq

    where = location(url)
    con, _, seen = _opened(where)
    index_id = uuid.uuid4().hex
    fs = filesystem()
    files = {}
    try:
        with tempfile.TemporaryDirectory(prefix="polytrace-compact-") as tmp:
            published = {t for c in seen.commits for t in c["tables"]} | set((seen.index or {}).get("files", {}))
            for table in sorted(published):
                reader = con.sql(f'SELECT * FROM "{table}"').to_arrow_reader(ROW_GROUP_ROWS)
                local = Path(tmp) / f"{table}.parquet"
                written = 0
                with pq.ParquetWriter(local, reader.schema, compression="zstd") as writer:
                    for rows in row_groups(reader):
                        writer.write_table(rows, row_group_size=ROW_GROUP_ROWS)
                        written += rows.num_rows
                if written:
                    files[table] = _compact_key(where, index_id, table)
                    _upload(fs, local, files[table])
        covered = {**{r: (seen.index or {})["runs"][r] for r in seen.covered},
                   **{c["run_id"]: {"digest": c["digest"], "sha256": c.get("sha256")} for c in seen.commits}}
        for run_id, entry in covered.items():
            entry["listed"] = list(seen.listed[run_id])
        with fs.open_output_stream(where.key(INDEX)) as out:
            out.write(json.dumps({"id": index_id, "runs": covered, "files": files}).encode())
    except OSError as e:
        raise failure(where, e) from None
    finally:
        con.close()
    return seen


def row_groups(reader):
    """The reader's batches gathered into tables of up to ROW_GROUP_ROWS rows or ROW_GROUP_BYTES:
    over the runs' own files DuckDB gives about a batch per file, and a row group per batch made a
    compacted file of 10,000 runs 10,000 row groups, each column chunk of which is a request of
    its own when the file is read (runs_overview took 10.6 s over them)."""
    held, rows, size = [], 0, 0
    for batch in reader:
        held.append(batch)
        rows, size = rows + batch.num_rows, size + batch.nbytes
        if rows >= ROW_GROUP_ROWS or size >= ROW_GROUP_BYTES:
            yield pa.Table.from_batches(held, reader.schema)
            held, rows, size = [], 0, 0
    if held:
        yield pa.Table.from_batches(held, reader.schema)


# ---- inputs in the store -----------------------------------------------------------------------

def download(url: str, into: Path, max_bytes: int) -> Path:
    """The objects under s3://bucket/prefix (one object, or every one below it as a folder),
    streamed to files under `into` that keep their relative paths; at most max_bytes in all."""
    from pyarrow.fs import FileSelector, FileType

    where = location(url)
    fs = filesystem()
    try:
        info = fs.get_file_info(where.key())
        if info.type == FileType.File:
            objects = [info]
            base = where.key().rsplit("/", 1)[0]
        else:
            objects = [i for i in fs.get_file_info(FileSelector(where.key(), recursive=True, allow_not_found=True))
                       if i.type == FileType.File]
            base = where.key()
        if not objects:
            raise StoreError(f"{where}: no object at or below this prefix")
        total = sum(i.size or 0 for i in objects)
        if total > max_bytes:
            raise StoreError(f"{where}: {total:,} bytes below this prefix, over the {max_bytes:,}-byte limit")
        root = into / (where.prefix.rsplit("/", 1)[-1] or where.bucket)
        for i in objects:
            target = root / i.path[len(base):].lstrip("/") if info.type != FileType.File else root
            if not target.resolve().is_relative_to(root.resolve()):
                raise StoreError(f"{where}: an object key leaves its prefix ({i.path[len(base):][:80]!r})")
            target.parent.mkdir(parents=True, exist_ok=True)
            with fs.open_input_stream(i.path) as src, open(target, "wb") as out:
                while chunk := src.read(CHUNK):
                    out.write(chunk)
    except OSError as e:
        raise failure(where, e) from None
    return root


def is_published_lake(url: str) -> bool:
    """Whether s3://bucket/prefix holds a PolyTrace lake (an index, or a commit) rather than input
    files."""
    from pyarrow.fs import FileType

    where = location(url)
    fs = filesystem()
    try:
        return fs.get_file_info(where.key(INDEX)).type == FileType.File or \
            bool(fs.get_file_info(_commit_selector(where)))
    except OSError as e:
        raise failure(where, e) from None


def copied_to_folder(url: str, into: Path, max_bytes: int) -> Path:
    """The runs a reader of the lake sees, each whole, written as a local lake (store/lake.py's
    layout) under `into`, for ingest to restore; refused past max_bytes of data objects (every
    one under data/ and compact/, so at most what the copy reads)."""
    from pyarrow.fs import FileSelector, FileType

    where = location(url)
    fs = filesystem()
    try:
        total = sum(i.size or 0 for folder in ("data", "compact")
                    for i in fs.get_file_info(FileSelector(where.key(folder), recursive=True, allow_not_found=True))
                    if i.type == FileType.File)
    except OSError as e:
        raise failure(where, e) from None
    if total > max_bytes:
        raise StoreError(f"{where}: {total:,} bytes of data objects, over the {max_bytes:,}-byte limit")
    root = into / (where.prefix.rsplit("/", 1)[-1] or where.bucket)
    con = open_lake(url)
    try:
        run_ids = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()]
        per_run = [t for t, columns in canonical_schema()[0].items() if any(c == "run_id" for c, _ in columns)]
        export_runs(con, run_ids, root, tables=per_run)
    finally:
        con.close()
    return root


# ---- vacuum ------------------------------------------------------------------------------------

def vacuum(url: str, grace_s: float) -> list[str]:
    """Delete the data files no commit names, and the compacted files the index does not, that
    are older than grace_s (a publisher or compactor may still be uploading newer ones); the keys
    deleted."""
    from pyarrow.fs import FileSelector, FileType

    where = location(url)
    fs = filesystem()
    live = {data_keys(where, c, t) for c in commits(where, fs) for t in c["tables"]}
    live |= set(((_index(where, fs) or {}).get("files") or {}).values())
    cutoff = time.time_ns() - int(grace_s * 1e9)
    try:
        infos = [i for folder in ("data", "compact")
                 for i in fs.get_file_info(FileSelector(where.key(folder), recursive=True, allow_not_found=True))]
        orphans = sorted(i.path for i in infos if i.type == FileType.File and i.path not in live
                         and (i.mtime_ns or 0) < cutoff)
        for key in orphans:
            fs.delete_file(key)
    except OSError as e:
        raise failure(where, e) from None
    return orphans


def known_runs(url: str) -> list[tuple[str, str | None]]:
    """(run_id, input sha256) of every published run: what an ingest into the lake dedups against.
    A compacted run's comes from the index, so only the commits published since are read."""
    seen = snapshot(location(url))
    indexed = (seen.index or {}).get("runs", {})
    return [(r, indexed[r].get("sha256")) for r in seen.covered] + [(c["run_id"], c.get("sha256")) for c in seen.commits]
