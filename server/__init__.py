"""The PolyTrace web service: REST API and dashboard pages over one DuckDB file."""
