"""Process wiring: the client API, the worker process, the ``keel`` CLI, a Temporal server.

Rooms, one concern each:

- ``keel.worker.client``: ``KeelClient`` and the errors it raises (the Python API);
- ``keel.worker.process``: a worker process: assembly, serving, health, telemetry, tracing,
  interceptors, the workflow sandbox;
- ``keel.worker.cli``: the ``keel`` command;
- ``keel.worker.server``: where a command's Temporal comes from: a configured server or the
  embedded dev server;
- ``keel.worker.settings``, ``keel.worker.payloads`` (the data converter) and
  ``keel.worker.shell`` (the commands printed for a person to copy, and the session id rule),
  shared by all of them.

Internal to Keel: what users need is imported from ``keel`` (``keel/__init__.py``).
"""

if __name__ != "keel.worker":  # the repository's top-level link, imported under its own name
    raise ImportError(
        f"{__name__} is keel.worker under a second name: import keel.worker instead "
        "(the top-level folder is only a link into keel/)"
    )
