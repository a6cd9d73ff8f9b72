"""The Python API for clients: ``KeelClient`` and the errors it raises.

Modules: ``keel_client`` (``KeelClient``: what changes a session; it holds the two parts
below and delegates to them), ``calls`` (``SessionCaller``: how a call to a session is made,
Temporal's errors as Keel's), ``reading`` (``SessionReader``: what reads a session without
writing history: state, events, the model's stream, listings), ``errors`` (every error the
client API raises, defined once), ``streams`` (every character a model streams, from the
worker's stream endpoint), ``paths`` (a user's paths, made sendable), ``agent_files`` (agent
files), ``schedules`` (``KeelSchedules``: jobs on a Temporal Schedule).

Internal to Keel: what users need is imported from ``keel`` (``keel/__init__.py``).
"""
