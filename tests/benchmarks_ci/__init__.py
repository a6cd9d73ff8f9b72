"""CI's small run of the benchmark runner (``tests.benchmarks``)."""
