"""Ingest settings for a test: the environment variable (for a CLI or server the test starts, which
read it as front ends do) and the same options for the library calls the test makes in-process
(ingest reads no environment: its caller passes them, polytrace/ingest/options.py)."""
from __future__ import annotations

from contextvars import ContextVar

from polytrace.ingest import options
from polytrace.settings import Settings


def set_ingest_env(monkeypatch, variable: str, value: str) -> None:
    monkeypatch.setenv(variable, value)
    given = options.IngestOptions.of(Settings())
    monkeypatch.setattr(options, "_current", ContextVar("polytrace_ingest_options", default=given))
