"""A user's own workflow with an agent step: prepare, agent (``run_agent``), publish."""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel
from temporalio import activity, workflow

from keel import AgentResult, SessionConfig, run_agent


class PipelineInput(BaseModel):
    topic: str
    config: SessionConfig
    agent_id: str | None = None


class PipelineResult(BaseModel):
    prepared: str
    agent: AgentResult
    published: str


@activity.defn
async def prepare(topic: str) -> str:
    return f"notes on {topic}"


@activity.defn
async def publish(text: str) -> str:
    return f"published: {text}"


@workflow.defn
class Pipeline:
    """Three steps; the middle one is an agent turn in a child session."""

    @workflow.run
    async def run(self, input: PipelineInput) -> PipelineResult:
        prepared = await workflow.execute_activity(
            prepare, input.topic, start_to_close_timeout=timedelta(seconds=30)
        )
        agent = await run_agent(
            f"Write about: {prepared}", config=input.config, session_id=input.agent_id
        )
        text = "\n".join(b.text for b in (agent.message.content if agent.message else []) if b.text)
        published = await workflow.execute_activity(
            publish, text, start_to_close_timeout=timedelta(seconds=30)
        )
        return PipelineResult(prepared=prepared, agent=agent, published=published)
