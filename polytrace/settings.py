"""Every POLYTRACE_* setting, read and checked in one place.

Each field of Settings reads POLYTRACE_<FIELD> (e.g. POLYTRACE_QUERY_TIMEOUT_MS=30000); what a
caller passes (a command-line flag) wins over it. A value that cannot be used is a SettingsError
of one line naming its variable. Plain Python: the CLI and every parse worker import this
module, and pydantic-settings took 0.15-0.18 s of each one's start.
"""
from __future__ import annotations

import ipaddress
import json
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

PREFIX = "POLYTRACE_"


class SettingsError(Exception):
    """A POLYTRACE_* variable with a value that cannot be used; one line naming it."""


# ---- values, from a variable's text or a caller's value; ValueError says what is wrong --------

def _text(value: Any) -> str:
    if value is None:
        raise ValueError("must be given")
    return str(value)


def _integer(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"not an integer: {value!r}")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"not an integer: {value!r}") from None


def _seconds(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"not a number of seconds: {value!r}") from None


_SIZE = re.compile(r"\s*(\d*\.?\d+)\s*([a-zA-Z]*)\s*")
_UNITS = {"": 1, "b": 1, **{u + "b": 1000 ** (i + 1) for i, u in enumerate("kmgtpe")},
          **{u + "ib": 1024 ** (i + 1) for i, u in enumerate("kmgtpe")}}


def _size(value: Any) -> int:
    """Bytes, or a number with a unit: 2GiB (2 * 1024**3), 512MB (512 * 1000**2)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _SIZE.fullmatch(str(value))
    unit = match and _UNITS.get(match[2].lower())
    if not unit:
        raise ValueError(f"not a size: {value!r} (bytes, or a number with a unit: 2GiB, 512MB)")
    return int(float(match[1]) * unit)


def _names(value: Any) -> list[str]:
    """A comma-separated list or a JSON list of strings."""
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    text = str(value).strip()
    if text.startswith("["):
        try:
            listed = json.loads(text)
        except ValueError:
            listed = None
        if not isinstance(listed, list):
            raise ValueError(f"not a JSON list: {text!r}")
        return [str(v) for v in listed]
    return [v.strip() for v in text.split(",") if v.strip()]


def _at_least(low: float, parse: Callable[[Any], Any] = _integer, high: float | None = None):
    def checked(value: Any):
        number = parse(value)
        if number < low or (high is not None and number > high):
            raise ValueError(f"{number} is out of range ({low} to {high})" if high is not None
                             else f"must be {low} or more, not {number}")
        return number
    return checked


def _above_zero(parse: Callable[[Any], Any]):
    def checked(value: Any):
        number = parse(value)
        if number <= 0:
            raise ValueError(f"must be more than 0, not {number}")
        return number
    return checked


def _one_of(*choices: str):
    def checked(value: Any) -> str:
        if str(value) not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, not {value!r}")
        return str(value)
    return checked


def _optional(parse: Callable[[Any], Any]):
    """None for no value or a blank one, else `parse`'s."""
    return lambda value: None if value in (None, "") else parse(value)


# field -> (default, check): the order is the documentation's (README, Settings)
FIELDS: dict[str, tuple[Any, Callable[[Any], Any]]] = {
    # The DuckDB file of the CLI, `connect()` and the server.
    "db": ("polytrace.duckdb", _text),
    # A Parquet lake (polytrace export / ingest --lake) to serve instead of db, read-only.
    "lake": (None, _optional(str)),
    "host": ("127.0.0.1", _text),
    "port": (8000, _at_least(0, high=65535)),
    # Sizes take a number of bytes or a unit: 2GiB, 512MB.
    "max_upload_bytes": (2 * 1024**3, _above_zero(_size)),
    # Seconds an upload's whole body may take to arrive (a client trickling bytes holds a
    # connection and a temporary folder); past it the server answers 408.
    "upload_timeout_s": (600.0, _above_zero(_seconds)),
    "query_timeout_ms": (10_000, _above_zero(_integer)),
    # The server's DuckDB memory for queries and writes (DuckDB's own default is 80% of RAM):
    # past it a query spills to the database's .tmp folder where it can, else answers 507.
    "memory_limit": (2 * 1024**3, _above_zero(_size)),
    # The server's DuckDB worker threads (default: DuckDB's, one per core).
    "threads": (None, _optional(_at_least(1))),
    # Catalog queries the server runs at once: a request waits for a slot up to its time limit
    # (query_timeout_ms), then answers 503 with Retry-After. Answers kept or cached need none.
    "query_slots": (4, _at_least(1)),
    "row_cap": (100_000, _above_zero(_integer)),
    # Rows of recent query answers kept in memory (emptied by every upload and delete); 0 is off.
    "result_cache_rows": (100_000, _at_least(0)),
    # Bearer token that POST and DELETE must present.
    "token": (None, _optional(str)),
    # Whether reads need the token too: "required" (every page, query, export and /docs),
    # "open", or unset: required when the server binds a non-loopback address with a token.
    "read_token": (None, _optional(_one_of("required", "open"))),
    # Origins allowed by CORS: comma-separated or a JSON list; empty means CORS is off.
    "cors_origins": ((), _names),
    # Host names the server answers to besides loopback ones and `host` (comma-separated or a
    # JSON list); "*" answers any. Others get 400: the DNS-rebinding defence.
    "allowed_hosts": ((), _names),
    # Parse worker processes for a multi-file ingest (default: one per core; 1 parses in-process).
    "parse_jobs": (None, _optional(_at_least(1))),
    # Largest decompressed size accepted from one compressed file or archive (all its members).
    # Parsing streams in batches, so memory no longer grows with it; what still does is parse
    # time, archive spool disk, and the parsed rows of one input that load holds until it
    # inserts them (JSON lines can parse to more Arrow bytes than they take): 2 GiB, what an
    # upload of plain files may hold (max_upload_bytes), admits every real trace seen so far.
    "max_inflate_bytes": (2 * 1024**3, _above_zero(_size)),
    # A local tokenizer.json: verl rollout dumps count lengths in its tokens instead of characters.
    "tokenizer": (None, _optional(Path)),
    # A directory of a site's own .sql queries in the catalog's format.
    "extra_queries": (None, _optional(Path)),
}


# each field's environment variable; get() looks up these few rather than walking the
# environment, which a request does through the catalog
VARIABLES = {name: PREFIX + name.upper() for name in FIELDS}


class Settings:
    """The settings: each field from the keyword given, else POLYTRACE_<FIELD>, else its
    default, checked (SettingsError names the variable of a bad one)."""

    db: str
    lake: str | None
    host: str
    port: int
    max_upload_bytes: int
    upload_timeout_s: float
    query_timeout_ms: int
    memory_limit: int
    threads: int | None
    query_slots: int
    row_cap: int
    result_cache_rows: int
    token: str | None
    read_token: str | None
    cors_origins: list[str]
    allowed_hosts: list[str]
    parse_jobs: int | None
    max_inflate_bytes: int
    tokenizer: Path | None
    extra_queries: Path | None

    def __init__(self, **given: Any):
        unknown = sorted(set(given) - set(FIELDS))
        if unknown:
            raise TypeError(f"no setting named {unknown[0]!r}")
        for name, (default, check) in FIELDS.items():
            variable = VARIABLES[name]
            value = given[name] if name in given else os.environ.get(variable, default)
            try:
                setattr(self, name, check(value))
            except ValueError as e:
                raise SettingsError(f"setting {variable}: {e}") from None
        if self.read_token == "required" and not self.token:
            raise SettingsError(f"setting {VARIABLES['read_token']}: required needs a token to show "
                                f"(set {VARIABLES['token']})")

    def __repr__(self) -> str:
        shown = {name: "***" if name == "token" and self.token else getattr(self, name) for name in FIELDS}
        return f"Settings({', '.join(f'{k}={v!r}' for k, v in shown.items())})"

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    @property
    def reads_need_token(self) -> bool:
        """Reads show the token: asked for, or by default on a non-loopback address with a token."""
        if self.read_token is not None:
            return self.read_token == "required"
        return bool(self.token) and not self.loopback

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
    return Settings(**overrides)


def get() -> Settings:
    """The settings as the environment says now (cached while it says the same)."""
    return _cached(tuple(os.environ.get(variable) for variable in VARIABLES.values()))


@lru_cache(maxsize=8)
def _cached(environment: tuple) -> Settings:
    return load()
