"""Benchmarks: each script measures one target against a baseline in the same process tree."""
