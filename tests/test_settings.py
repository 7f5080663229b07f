"""Every POLYTRACE_* variable goes through polytrace.settings: sizes with units, one-line errors."""
from __future__ import annotations

import subprocess
import sys

import pytest

from polytrace import settings
from polytrace.settings import SettingsError


def test_sizes_take_bytes_or_units(monkeypatch):
    monkeypatch.setenv("POLYTRACE_MAX_INFLATE_BYTES", "8GB")
    monkeypatch.setenv("POLYTRACE_MAX_UPLOAD_BYTES", "512MiB")
    s = settings.get()
    assert s.max_inflate_bytes == 8 * 1000**3 and s.max_upload_bytes == 512 * 1024**2
    monkeypatch.setenv("POLYTRACE_MAX_INFLATE_BYTES", "1234")
    assert settings.get().max_inflate_bytes == 1234  # the cache follows the environment


@pytest.mark.parametrize("name,value,message", [
    ("POLYTRACE_MAX_INFLATE_BYTES", "lots", "setting POLYTRACE_MAX_INFLATE_BYTES: could not parse value and unit"),
    ("POLYTRACE_PARSE_JOBS", "0", "setting POLYTRACE_PARSE_JOBS: Input should be greater than or equal to 1"),
    ("POLYTRACE_QUERY_TIMEOUT_MS", "soon", "setting POLYTRACE_QUERY_TIMEOUT_MS: Input should be a valid integer"),
    ("POLYTRACE_CORS_ORIGINS", "[not json", "setting POLYTRACE_CORS_ORIGINS: Value error, not a JSON list"),
])
def test_a_bad_value_is_one_line_naming_the_variable(monkeypatch, name, value, message):
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as e:
        settings.get()
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_the_cli_says_a_bad_setting_in_one_line_and_exits_2(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "POLYTRACE_MAX_INFLATE_BYTES": "8 gigs"}
    out = subprocess.run([sys.executable, "-m", "polytrace", "query", "runs", "--db", str(tmp_path / "x.duckdb")],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 2
    assert out.stderr.startswith("error: setting POLYTRACE_MAX_INFLATE_BYTES:") and out.stderr.count("\n") == 1


def test_query_on_a_missing_database_is_an_error_and_creates_nothing(tmp_path):
    db = tmp_path / "typo.duckdb"
    out = subprocess.run([sys.executable, "-m", "polytrace", "query", "runs", "--db", str(db)],
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr == f"error: no database at {db} (ingest a run first: polytrace ingest PATH --db {db})\n"
    assert not db.exists()
