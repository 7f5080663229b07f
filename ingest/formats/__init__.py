"""One module per trace format; each exposes FORMAT (see ingest.contract.Format)."""
