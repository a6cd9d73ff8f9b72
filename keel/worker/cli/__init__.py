"""The ``keel`` command.

Modules: ``main`` (the parser and the entry point), ``commands`` (what each command does),
``run_inputs`` (what ``keel run`` reads from the command line), ``console`` (what it prints and
asks), ``follow`` (progress and ``keel watch``).

Internal to Keel: what users need is imported from ``keel`` (``keel/__init__.py``).
"""
