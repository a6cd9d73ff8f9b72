"""Where a command's Temporal comes from: a configured server, or the embedded dev server.

Modules: ``connection`` (``open_connection``: connect, or embed a dev server and run a worker
in this process), ``devserver`` (the Temporal CLI's dev server, started and stopped).

Internal to Keel: what users need is imported from ``keel`` (``keel/__init__.py``).
"""
