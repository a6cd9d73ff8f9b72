"""The Python API for clients: ``KeelClient`` and the errors it raises.

Modules: ``keel_client`` (``KeelClient``: what changes a session), ``reading`` (what reads one
without writing history: state, events, the model's stream, listings), ``streams`` (every
character a model streams, from the worker's stream endpoint), ``calls`` (how a call to a
session fails: Temporal's errors as Keel's), ``paths`` (a user's paths, made sendable),
``agent_files`` (agent files), ``schedules`` (``KeelSchedules``: jobs on a Temporal Schedule).

Internal to Keel: what users need is imported from ``keel`` (``keel/__init__.py``).
"""
