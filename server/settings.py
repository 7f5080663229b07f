"""Server settings from POLYTRACE_* environment variables."""
from __future__ import annotations

import ipaddress
import json
from functools import lru_cache
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class Settings(BaseSettings):
    """Every field reads POLYTRACE_<FIELD>; e.g. POLYTRACE_QUERY_TIMEOUT_MS=30000."""

    model_config = SettingsConfigDict(env_prefix="POLYTRACE_")

    db: str = "polytrace.duckdb"
    # A Parquet lake (polytrace export / ingest --lake) to serve instead of db, read-only.
    lake: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    max_upload_bytes: int = Field(2 * 1024**3, gt=0)
    query_timeout_ms: int = Field(10_000, gt=0)
    row_cap: int = Field(100_000, gt=0)
    # Rows of recent query answers kept in memory (emptied by every upload and delete); 0 is off.
    result_cache_rows: int = Field(100_000, ge=0)
    # Bearer token that POST and DELETE must present; reads stay open.
    token: str | None = None
    # Origins allowed by CORS: comma-separated or a JSON list; empty means CORS is off.
    cors_origins: Annotated[list[str], NoDecode] = []

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _split_origins(cls, value):
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
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


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
