"""Catalog queries on Apache Spark over a Parquet lake: local mode, or a cluster through Spark Connect."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from polytrace.queries.translate import to_spark, view_body
from polytrace.store.errors import StoreError
from polytrace.store.lake import canonical_schema, is_lake, lake_tables

# ANSI on: Spark raises on overflow and bad casts instead of returning NULL, as DuckDB does.
# Partition type inference off: run_id=0001 names a run, it is not the integer 1.
SESSION_CONF = {
    "spark.sql.ansi.enabled": "true",
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
}
LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    # one GC thread: local mode shares a small machine with the Python side
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC",
    # local mode talks to itself only: keep the driver on loopback, not the host's address
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}
DUCKDB_TO_SPARK_TYPES = {"VARCHAR": "STRING", "INTEGER": "INT", "BIGINT": "BIGINT", "DOUBLE": "DOUBLE",
                         "BOOLEAN": "BOOLEAN", "TIMESTAMP": "TIMESTAMP_NTZ", "JSON": "STRING",
                         "BLOB": "BINARY"}


class SparkUnavailable(Exception):
    """pyspark is not installed, or no Java runtime to start it."""


def session(remote: str | None = None, master: str = "local[2]"):
    """A Spark session: Spark Connect at `remote` (sc://host:port), else a local one."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkUnavailable("--engine spark needs pyspark: pip install 'polytrace[spark]'") from None
    builder = SparkSession.builder.appName("polytrace")
    if remote:
        builder = builder.remote(remote)
    else:
        if not shutil.which("java"):
            raise SparkUnavailable("--engine spark in local mode needs a Java runtime (java on PATH)")
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.master(master)
        for key, value in LOCAL_CONF.items():
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if not remote:
        spark.sparkContext.setLogLevel("ERROR")
    for key, value in SESSION_CONF.items():
        spark.conf.set(key, value)
    return spark


def _spark_type(duckdb_type: str) -> str:
    if duckdb_type.endswith("[]"):
        return f"ARRAY<{_spark_type(duckdb_type[:-2])}>"
    return DUCKDB_TO_SPARK_TYPES.get(duckdb_type, duckdb_type)


def register_lake(spark, root: str | Path) -> None:
    """Temporary views over the lake named like the canonical tables, then the canonical views.

    Spark reads the files itself: with Spark Connect, root must be a path the cluster sees
    at the same place (a shared file system)."""
    root = Path(root)
    if not is_lake(root):
        raise StoreError(f"{root} is not a Parquet lake (no table=<name> directory)")
    tables, views = canonical_schema()
    present = lake_tables(root)
    for table, columns in tables.items():
        # The canonical schema is given, so Spark infers nothing (no job per table), a column
        # the files lack reads as NULL, and run_id is a string whatever its value looks like.
        schema = ", ".join(f"`{c}` {_spark_type(t)}" for c, t in columns)
        table_dir = present.get(table)
        if table_dir is not None and any(table_dir.glob("*/*.parquet")):
            path = str(table_dir.resolve())
            frame = spark.read.schema(schema).option("basePath", path).parquet(path)
        else:
            frame = spark.createDataFrame([], schema)
        frame.select(*(c for c, _ in columns)).createOrReplaceTempView(table)
    for name, sql in views.items():
        spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW `{name}` AS {to_spark(view_body(sql))}")


class Spark:
    """The query runner's engine on Spark: catalog SQL translated, parameters bound as named
    markers, the answer as Arrow."""

    def __init__(self, spark):
        self.spark = spark

    def arrow(self, sql: str, bound: dict[str, Any], row_cap: int | None) -> tuple[pa.Table, bool]:
        frame = self.spark.sql(to_spark(sql), args=bound)
        if row_cap is not None:
            frame = frame.limit(row_cap + 1)
        try:
            table = frame.toArrow()
        except Exception as e:
            # interrupt() cancels the operation; the runner's time limit knows DuckDB's signal
            if "OPERATION_CANCELED" in str(e):
                raise duckdb.InterruptException(str(e).splitlines()[0]) from None
            raise
        if row_cap is None or table.num_rows <= row_cap:
            return table, False
        return table.slice(0, row_cap), True

    def interrupt(self) -> None:
        self.spark.interruptAll()
