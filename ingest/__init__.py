"""Ingest: detect a trace's format, parse it into canonical Arrow tables, load them into DuckDB."""
