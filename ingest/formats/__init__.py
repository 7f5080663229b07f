"""One module per trace format, each self-contained: it exposes FORMAT (see ingest.contract.Format)
with its sample and hooks, and imports no other format module."""
