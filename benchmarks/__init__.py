"""Reproducible performance runs: jobcore against the raw SQLite floor and Huey (`python -m benchmarks`)."""
