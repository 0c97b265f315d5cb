"""Benchmarks for mneme. Run one with `python -m bench.<name>` from the repository root."""
