"""Your own workflows, laid out as Temporal's samples lay an app out.

``Summarise`` runs one agent turn with ``keel.run_agent`` (a child ``AgentSession``), then
its own activity on the agent's answer. Keel's names come from ``keel`` only, so this file
may be called ``workflows.py`` next to your ``activities.py`` and ``worker.py``.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities import shout
    from keel import SessionConfig, run_agent


@workflow.defn
class Summarise:
    """Ask an agent about a topic, then shout its answer."""

    @workflow.run
    async def run(self, model: str, topic: str) -> str:
        """Run the agent's turn and the activity; the shouted answer."""
        result = await run_agent(f"Tell me about {topic}", config=SessionConfig(model=model))
        if result.status != "completed" or result.message is None:
            return f"the agent {result.status}: {result.error}"
        answer = "".join(block.text or "" for block in result.message.content)
        return await workflow.execute_activity(
            shout, answer, start_to_close_timeout=timedelta(seconds=10)
        )
