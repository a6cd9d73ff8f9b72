"""All of Keel's I/O: model calls, tool runs, the ``@tool`` registry, conversation storage.

Public surface::

    from activities import tool, ToolContext, tool_policy, Verdict   # declare tools, policies
    from activities import open_store, ConversationStore              # a conversation store
    from activities import ModelActivities, ToolActivities            # for a worker of your own
    from activities import post_notification                          # keel.notify.post

``tool_policy`` and ``Verdict`` are defined in ``workflows.tool_policies`` (a policy runs in
workflow code) and offered here beside ``tool``, where tool authors look. Other modules are
internal.
"""

from activities.model_call import ModelActivities
from activities.notify import post_notification
from activities.store import ConversationStore, open_store
from activities.tool_run import ToolActivities
from activities.tools import ToolContext, tool
from workflows.tool_policies import Verdict, tool_policy

__all__ = [
    "ConversationStore",
    "ModelActivities",
    "ToolActivities",
    "ToolContext",
    "Verdict",
    "open_store",
    "post_notification",
    "tool",
    "tool_policy",
]
