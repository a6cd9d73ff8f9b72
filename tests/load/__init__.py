"""Load: many concurrent sessions on one worker; the soak runner is tests.benchmarks.load."""
