"""All of Keel's I/O: model calls, tool runs, the ``@tool`` registry, conversation storage.

Public surface::

    from activities import tool, ToolContext          # declare tools
    from activities import open_store                 # a conversation store
    from activities import ModelActivities, ToolActivities  # for a worker
"""

from activities.model_call import ModelActivities
from activities.store import ConversationStore, open_store
from activities.tool_run import ToolActivities
from activities.tools import ToolContext, tool

__all__ = [
    "ConversationStore",
    "ModelActivities",
    "ToolActivities",
    "ToolContext",
    "open_store",
    "tool",
]
