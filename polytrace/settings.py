"""Every POLYTRACE_* setting, read and checked in one place (pydantic-settings)."""
from __future__ import annotations

import ipaddress
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated

from pydantic import ByteSize, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

PREFIX = "POLYTRACE_"


class SettingsError(Exception):
    """A POLYTRACE_* variable with a value that cannot be used; one line naming it."""


class Settings(BaseSettings):
    """Every field reads POLYTRACE_<FIELD>; e.g. POLYTRACE_QUERY_TIMEOUT_MS=30000."""

    model_config = SettingsConfigDict(env_prefix=PREFIX)

    # The DuckDB file of the CLI, `connect()` and the server.
    db: str = "polytrace.duckdb"
    # A Parquet lake (polytrace export / ingest --lake) to serve instead of db, read-only.
    lake: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    # Sizes take a number of bytes or a unit: 2GiB, 512MB.
    max_upload_bytes: ByteSize = Field(ByteSize(2 * 1024**3), gt=0)
    # Seconds an upload's whole body may take to arrive (a client trickling bytes holds a
    # connection and a temporary folder); past it the server answers 408.
    upload_timeout_s: float = Field(600, gt=0)
    query_timeout_ms: int = Field(10_000, gt=0)
    row_cap: int = Field(100_000, gt=0)
    # Rows of recent query answers kept in memory (emptied by every upload and delete); 0 is off.
    result_cache_rows: int = Field(100_000, ge=0)
    # Bearer token that POST and DELETE must present; reads stay open.
    token: str | None = None
    # Origins allowed by CORS: comma-separated or a JSON list; empty means CORS is off.
    cors_origins: Annotated[list[str], NoDecode] = []
    # Host names the server answers to besides loopback ones and `host` (comma-separated or a
    # JSON list); "*" answers any. Others get 400: the DNS-rebinding defence.
    allowed_hosts: Annotated[list[str], NoDecode] = []
    # Parse worker processes for a multi-file ingest (default: one per core; 1 parses in-process).
    parse_jobs: int | None = Field(None, ge=1)
    # Largest decompressed size accepted from one compressed file or archive (all its members).
    # Parsing streams in batches, so memory no longer grows with it; what still does is parse
    # time, archive spool disk, and the parsed rows of one input that load holds until it
    # inserts them (JSON lines can parse to more Arrow bytes than they take): 2 GiB, what an
    # upload of plain files may hold (max_upload_bytes), admits every real trace seen so far.
    max_inflate_bytes: ByteSize = Field(ByteSize(2 * 1024**3), gt=0)
    # A local tokenizer.json: verl rollout dumps count lengths in its tokens instead of characters.
    tokenizer: Path | None = None
    # A directory of a site's own .sql queries in the catalog's format.
    extra_queries: Path | None = None

    @field_validator("cors_origins", "allowed_hosts", mode="before")
    @classmethod
    def _split_list(cls, value):
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    return json.loads(text)
                except ValueError:
                    raise ValueError("not a JSON list") from None
            return [o.strip() for o in text.split(",") if o.strip()]
        return value

    @field_validator("token")
    @classmethod
    def _blank_token_is_none(cls, value):
        return value or None

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    def exposure_warning(self) -> str | None:
        """A warning when anyone on the network could upload and delete runs."""
        if self.token or self.loopback:
            return None
        return (f"warning: serving on {self.host} without POLYTRACE_TOKEN: anyone who can reach "
                "this port can upload and delete runs (set POLYTRACE_TOKEN or bind 127.0.0.1)")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def load(**overrides) -> Settings:
    """Settings from the environment, with `overrides` (command-line flags) on top."""
    try:
        return Settings(**overrides)
    except ValidationError as e:
        first = e.errors()[0]
        name = f"{PREFIX}{str(first['loc'][0]).upper()}" if first.get("loc") else PREFIX + "*"
        raise SettingsError(f"setting {name}: {first['msg']}") from None


def get() -> Settings:
    """The settings as the environment says now (cached while it says the same)."""
    return _cached(tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(PREFIX))))


@lru_cache(maxsize=8)
def _cached(environment: tuple) -> Settings:
    return load()
