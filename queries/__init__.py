"""The query catalog: one documented .sql file per characterization query."""
