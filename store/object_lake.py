"""The lake in object storage: `s3://bucket/prefix`, on S3 or any S3-compatible store (MinIO, Ceph,
GCS through its S3 API), through pyarrow's S3 filesystem, which PolyTrace already depends on and
which DuckDB scans as Arrow datasets (its httpfs extension cannot be installed offline).

An object store has no rename, so a run is published by a commit object, not a folder rename:

    <prefix>/data/table=<name>/run_id=<id>/<digest>.parquet   each table's rows of the run
    <prefix>/commits/<id>.json                                 {"run_id", "digest", "sha256", "tables"}

A publisher uploads the data files first (each object appears whole, when its upload completes),
then writes the commit, one PUT. Readers list commits/ and read the files that each names, so a
run appears whole or not at all; data files no commit names (a publisher killed halfway, a run
published again) are invisible, and `polytrace lake vacuum` deletes them after a grace period.
`digest` is the hash of the run's files: publishing a run again with the same content writes the
same objects (idempotent); with new content, its commit moves to the new files at once.

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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from polytrace.store.errors import StoreError
from polytrace.store.lake import (PART_FILE, ForeignFiles, canonical_schema, canonical_select, export_runs,
                                  lake_connection, lake_tables, locked, partitions, replace_with_view)
from polytrace.store.runs import RUN_ID

SCHEME = "s3://"
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_DIGEST = re.compile(r"[0-9a-f]{16,64}")
CHUNK = 1 << 20
# commits are read in parallel: each is one small GET
READERS = 16


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

    options = {"connect_timeout": 10, "request_timeout": 60}
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
    tables = lake_tables(local_lake)
    for run_id in run_ids:
        files = {t: partitions(d)[run_id] / PART_FILE for t, d in tables.items() if run_id in partitions(d)}
        # a table without rows of the run is left out: the canonical table is empty without it
        files = {t: f for t, f in files.items() if t == "runs" or _rows(f)}
        digest = _digest(files)
        try:
            for table, file in files.items():
                _upload(fs, file, where.key("data", f"table={table}", f"run_id={run_id}", f"{digest}.parquet"))
            commit = {"run_id": run_id, "digest": digest, "sha256": _input_sha256(files["runs"]),
                      "tables": sorted(files)}
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
        h.update(table.encode() + b"\0" + hashlib.sha256(files[table].read_bytes()).digest())
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

def commits(where: Location, fs=None) -> list[dict]:
    """Every published run's commit, checked, in run id order."""
    from pyarrow.fs import FileSelector, FileType

    fs = fs or filesystem()
    try:
        infos = fs.get_file_info(FileSelector(where.key("commits"), allow_not_found=True))
        keys = sorted(i.path for i in infos if i.type == FileType.File and i.path.endswith(".json"))
        with ThreadPoolExecutor(READERS) as pool:
            bodies = list(pool.map(lambda k: _read(fs, k), keys))
    except OSError as e:
        raise failure(where, e) from None
    return [_checked(where, key, body) for key, body in zip(keys, bodies)]


def _read(fs, key: str) -> bytes:
    with fs.open_input_stream(key) as f:
        return f.read(1 << 16)


def _checked(where: Location, key: str, body: bytes) -> dict:
    name = key.rsplit("/", 1)[-1]
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
    return commit


def data_keys(where: Location, commit: dict, table: str) -> str:
    return where.key("data", f"table={table}", f"run_id={commit['run_id']}", f"{commit['digest']}.parquet")


def lake_state(url: str) -> tuple:
    """Changes whenever a run is published, published again or removed: its commit changes."""
    from pyarrow.fs import FileSelector

    where = location(url)
    try:
        infos = filesystem().get_file_info(FileSelector(where.key("commits"), allow_not_found=True))
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
    where = location(url)
    fs = filesystem()
    found = commits(where, fs)
    if not found:
        raise StoreError(f"{where} holds no published run (publish one with `polytrace export --out {where}` "
                         f"or `polytrace ingest --lake {where}`)")
    con = lake_connection()
    try:
        sources = attach_runs(con, where, fs, found, generation=0)
    except BaseException:
        con.close()
        raise
    return locked(con, memory_limit, threads), sources


def attach_runs(con, where: Location, fs, found: list[dict], generation: int) -> dict[str, object]:
    """Each table's view over the files these commits name, as an Arrow dataset DuckDB scans;
    the datasets by the names the views read. Datasets get a name per generation: a view
    replaced while a query reads the last one leaves that query its own."""
    import pyarrow.dataset as ds

    partitioning = ds.partitioning(pa.schema([("run_id", pa.string())]), flavor="hive")
    sources = {}
    for table, columns in canonical_schema()[0].items():
        keys = [data_keys(where, c, table) for c in found if table in c["tables"]]
        if not keys:
            continue
        try:
            dataset = ds.dataset(keys, filesystem=fs, format="parquet", partitioning=partitioning,
                                 partition_base_dir=where.key("data", f"table={table}"))
        except (OSError, pa.ArrowException) as e:
            raise failure(where, e) from None
        source = f"_lake_{table}_{generation}"
        con.register(source, dataset)
        sources[source] = dataset
        try:
            replace_with_view(con, table, canonical_select(con, columns, source))
        except (duckdb.Error, ForeignFiles, OSError, pa.ArrowException) as e:
            raise failure(f"{where}: table={table}", e) from None
    return sources


def follow(con, url: str, generation: int) -> dict[str, object]:
    """Point the views at the runs published now (a server over the lake, on a change); the
    datasets they read now."""
    where = location(url)
    fs = filesystem()
    return attach_runs(con, where, fs, commits(where, fs), generation)


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


# ---- vacuum ------------------------------------------------------------------------------------

def vacuum(url: str, grace_s: float) -> list[str]:
    """Delete the data files no commit names that are older than grace_s (a publisher may still
    be uploading the newer ones); the keys deleted."""
    from pyarrow.fs import FileSelector, FileType

    where = location(url)
    fs = filesystem()
    live = {data_keys(where, c, t) for c in commits(where, fs) for t in c["tables"]}
    cutoff = time.time_ns() - int(grace_s * 1e9)
    try:
        infos = fs.get_file_info(FileSelector(where.key("data"), recursive=True, allow_not_found=True))
        orphans = sorted(i.path for i in infos if i.type == FileType.File and i.path not in live
                         and (i.mtime_ns or 0) < cutoff)
        for key in orphans:
            fs.delete_file(key)
    except OSError as e:
        raise failure(where, e) from None
    return orphans


def known_runs(url: str) -> list[tuple[str, str | None]]:
    """(run_id, input sha256) of every published run: what an ingest into the lake dedups against."""
    return [(c["run_id"], c.get("sha256")) for c in commits(location(url))]
