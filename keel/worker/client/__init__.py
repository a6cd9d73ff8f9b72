"""The Python API for clients: ``KeelClient`` and the errors it raises.

Modules: ``keel_client`` (``KeelClient``: the parts below, by inheritance), ``calls``
(``SessionCaller``: the state the parts share, how a call to a session is made, Temporal's
errors as Keel's), ``reading`` (``SessionReader``: what reads a session without writing
history: state, events, the model's stream, listings), ``writing`` (``SessionWriter``:
prompts, turns, guidance, cancel, close), ``deciding`` (``SessionDecider``: approvals,
answers, standing approvals), ``client_tools`` (``ClientTools``: client-side tools run
here), ``errors`` (every error the client API raises, defined once), ``streams`` (every
character a model streams, from the worker's stream endpoint), ``paths`` (a user's paths,
made sendable), ``agent_files`` (agent files), ``schedules`` (``KeelSchedules``: jobs on a
Temporal Schedule).

Internal to Keel: what users need is imported from ``keel`` (``keel/__init__.py``).
"""
