"""Deterministic workflow code: the session workflow, the message model, the agent loop.

Imports only the standard library, temporalio, pydantic and its own modules. The modules
behind it: ``session`` (the loop), ``handlers`` (updates, signals, queries), ``ledger`` (the
state), ``contracts`` and ``activity_contracts`` (typed inputs and outputs), ``boundary`` and
``approvals`` (security checks), ``cycle``, ``activity_options``.

Internal to Keel: what users need is imported from ``keel`` (``keel/__init__.py``).
"""

if __name__ != "keel.workflows":  # the repository's top-level link, imported under its own name
    raise ImportError(
        f"{__name__} is keel.workflows under a second name: import keel.workflows instead "
        "(the top-level folder is only a link into keel/)"
    )
