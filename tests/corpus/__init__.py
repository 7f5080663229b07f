"""Bad-input corpus: seeded, deterministic malformed inputs for every ingest format."""
