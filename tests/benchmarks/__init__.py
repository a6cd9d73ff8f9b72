"""Benchmarks that print figures; run as modules (``python -m tests.benchmarks.history``)."""
