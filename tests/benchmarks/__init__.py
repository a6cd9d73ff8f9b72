"""Benchmarks that print figures: ``python -m tests.benchmarks`` (Keel against the floor, see
``tests.benchmarks.runner``) and single modules (``python -m tests.benchmarks.history``)."""
