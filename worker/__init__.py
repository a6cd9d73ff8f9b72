"""Keel worker process: Temporal worker wiring, CLI and the embedded dev server."""
