"""Server settings from POLYTRACE_* environment variables."""
from __future__ import annotations

from functools import lru_cache

from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="POLYTRACE_")

    db: str = "polytrace.duckdb"
    host: str = "127.0.0.1"
    port: int = 8000
    max_upload_bytes: int = 2 * 1024**3
    query_timeout_ms: int = 10_000
    row_cap: int = 100_000
    token: str | None = None
    cors_origins: list[str] = []


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
