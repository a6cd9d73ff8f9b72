"""Tests of the Python client API (``keel.worker.client``): KeelClient, its parts, agent files."""
