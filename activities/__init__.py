"""All of Keel's I/O: model calls, tool runs, the ``@tool`` registry, conversation storage.

Internal to Keel: what users need is imported from ``keel`` (``keel/__init__.py``), where
tool authors find ``tool``, ``ToolContext``, ``tool_policy`` and ``Verdict``.
"""
