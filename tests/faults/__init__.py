"""Fault injection: workers run as separate processes and are killed at chosen points."""
