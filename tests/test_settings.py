"""Every POLYTRACE_* variable goes through polytrace.settings: sizes with units, one-line errors."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
    monkeypatch.setenv("POLYTRACE_MAX_INFLATE_BYTES", "1.5 kib")
    assert settings.get().max_inflate_bytes == 1536


def test_every_field_reads_its_variable_and_a_given_value_wins(monkeypatch):
    for name in settings.FIELDS:
        monkeypatch.delenv(f"POLYTRACE_{name.upper()}", raising=False)
    default = settings.Settings()
    assert (default.db, default.port, default.token, default.cors_origins, default.parse_jobs,
            default.tokenizer) == ("polytrace.duckdb", 8000, None, [], None, None)
    assert (default.memory_limit, default.threads, default.query_slots) == (2 * 1024**3, None, 4)
    monkeypatch.setenv("POLYTRACE_PORT", "9000")
    monkeypatch.setenv("POLYTRACE_TOKEN", "")  # blank: no token
    monkeypatch.setenv("POLYTRACE_ALLOWED_HOSTS", '["a.example", "b.example"]')
    monkeypatch.setenv("POLYTRACE_CORS_ORIGINS", "http://a.example, http://b.example")
    monkeypatch.setenv("POLYTRACE_TOKENIZER", "/models/tokenizer.json")
    s = settings.load(port=8123, db="x.duckdb")
    assert (s.port, s.db, s.token, s.allowed_hosts, s.cors_origins, s.tokenizer) == (
        8123, "x.duckdb", None, ["a.example", "b.example"], ["http://a.example", "http://b.example"],
        Path("/models/tokenizer.json"))
    assert settings.Settings().port == 9000
    with pytest.raises(TypeError, match="no setting named 'dbb'"):
        settings.load(dbb="x")


@pytest.mark.parametrize("name,value,message", [
    ("POLYTRACE_MAX_INFLATE_BYTES", "lots",
     "setting POLYTRACE_MAX_INFLATE_BYTES: not a size: 'lots' (bytes, or a number with a unit: 2GiB, 512MB)"),
    ("POLYTRACE_MAX_UPLOAD_BYTES", "0", "setting POLYTRACE_MAX_UPLOAD_BYTES: must be more than 0, not 0"),
    ("POLYTRACE_PARSE_JOBS", "0", "setting POLYTRACE_PARSE_JOBS: must be 1 or more, not 0"),
    ("POLYTRACE_PORT", "70000", "setting POLYTRACE_PORT: 70000 is out of range (0 to 65535)"),
    ("POLYTRACE_QUERY_TIMEOUT_MS", "soon", "setting POLYTRACE_QUERY_TIMEOUT_MS: not an integer: 'soon'"),
    ("POLYTRACE_UPLOAD_TIMEOUT_S", "-1", "setting POLYTRACE_UPLOAD_TIMEOUT_S: must be more than 0, not -1.0"),
    ("POLYTRACE_CORS_ORIGINS", "[not json", "setting POLYTRACE_CORS_ORIGINS: not a JSON list: '[not json'"),
    ("POLYTRACE_MEMORY_LIMIT", "all of it", "setting POLYTRACE_MEMORY_LIMIT: not a size: 'all of it'"),
    ("POLYTRACE_QUERY_SLOTS", "0", "setting POLYTRACE_QUERY_SLOTS: must be 1 or more, not 0"),
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


def test_the_apps_settings_reach_the_ingest_of_an_upload(tmp_path, monkeypatch):
    """create_app(Settings(max_inflate_bytes=...)) is the limit its uploads get, with no
    POLYTRACE_MAX_INFLATE_BYTES in the environment: the one Settings object travels down."""
    import gzip

    from fastapi.testclient import TestClient

    from polytrace.server.app import create_app
    from polytrace.settings import Settings

    monkeypatch.delenv("POLYTRACE_MAX_INFLATE_BYTES", raising=False)
    line = b'{"step": 0, "input": 10, "output": [1, 3]}\n'
    packed = gzip.compress(line * 100)  # 4,400 bytes inflated
    app = create_app(Settings(db=str(tmp_path / "small.duckdb"), max_inflate_bytes=1024, token="t"))
    with TestClient(app, base_url="http://127.0.0.1") as c:
        got = c.post("/api/runs", files={"file": ("packed_lengths_step_0.jsonl.gz", packed)},
                     headers={"Authorization": "Bearer t"})
    assert got.status_code == 400, got.text
    assert got.json()["error"] == ("packed_lengths_step_0.jsonl.gz: gzip inflates past 1024 bytes "
                                   "(limit POLYTRACE_MAX_INFLATE_BYTES)")
    app = create_app(Settings(db=str(tmp_path / "large.duckdb"), max_inflate_bytes=1 << 20, token="t"))
    with TestClient(app, base_url="http://127.0.0.1") as c:
        got = c.post("/api/runs", files={"file": ("packed_lengths_step_0.jsonl.gz", packed)},
                     headers={"Authorization": "Bearer t"})
    assert got.status_code == 201, got.text
