"""All of Keel's I/O: model calls, tool runs, the ``@tool`` registry, conversation storage.

Internal to Keel: what users need is imported from ``keel`` (``keel/__init__.py``), where
tool authors find ``tool``, ``ToolContext``, ``tool_policy`` and ``Verdict``.
"""

if __name__ != "keel.activities":  # the repository's top-level link, imported under its own name
    raise ImportError(
        f"{__name__} is keel.activities under a second name: import keel.activities instead "
        "(the top-level folder is only a link into keel/)"
    )
