"""The storage layer: schema, aggregates, connections and the Parquet lake layout."""
