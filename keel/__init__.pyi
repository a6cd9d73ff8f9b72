"""Keel's public names: this file is their one list.

Type checkers read it as ``keel``'s interface; at run time ``keel/__init__.py`` reads it once
to import each name from its module when first used.
"""

from keel.activities.function_judges import judge as judge
from keel.activities.store import ConversationStore as ConversationStore
from keel.activities.store import open_store as open_store
from keel.activities.tools import ToolContext as ToolContext
from keel.activities.tools import tool as tool
from keel.worker.client.agent_files import load_agent_file as load_agent_file
from keel.worker.client.errors import AgentFileError as AgentFileError
from keel.worker.client.errors import NoWorker as NoWorker
from keel.worker.client.errors import RequestRejected as RequestRejected
from keel.worker.client.errors import ScheduleNotFound as ScheduleNotFound
from keel.worker.client.errors import SessionClosed as SessionClosed
from keel.worker.client.errors import SessionNotFound as SessionNotFound
from keel.worker.client.errors import WorkerWait as WorkerWait
from keel.worker.client.keel_client import KeelClient as KeelClient
from keel.worker.client.replays import CaseExpectation as CaseExpectation
from keel.worker.client.replays import ReplayCase as ReplayCase
from keel.worker.client.replays import ReplayReport as ReplayReport
from keel.worker.client.run_status import SessionEnd as SessionEnd
from keel.worker.client.schedules import KeelSchedules as KeelSchedules
from keel.worker.client.streams import TextChunk as TextChunk
from keel.worker.process.assembly import connect as connect
from keel.worker.process.plugin import KeelPlugin as KeelPlugin
from keel.worker.settings import Settings as Settings
from keel.workflows.activity_contracts import JudgeRequest as JudgeRequest
from keel.workflows.activity_contracts import JudgeVerdict as JudgeVerdict
from keel.workflows.agents import AgentResult as AgentResult
from keel.workflows.agents import run_agent as run_agent
from keel.workflows.boundary import InputRejected as InputRejected
from keel.workflows.contracts import Answer as Answer
from keel.workflows.contracts import Decision as Decision
from keel.workflows.contracts import Event as Event
from keel.workflows.contracts import InferenceConfig as InferenceConfig
from keel.workflows.contracts import Interrupt as Interrupt
from keel.workflows.contracts import InterruptAck as InterruptAck
from keel.workflows.contracts import PendingView as PendingView
from keel.workflows.contracts import SessionConfig as SessionConfig
from keel.workflows.contracts import SessionState as SessionState
from keel.workflows.contracts import SubAgent as SubAgent
from keel.workflows.contracts import TurnRecord as TurnRecord
from keel.workflows.effect_contracts import EffectAttempt as EffectAttempt
from keel.workflows.effect_contracts import EffectRecord as EffectRecord
from keel.workflows.effect_contracts import EffectsView as EffectsView
from keel.workflows.messages import ContentBlock as ContentBlock
from keel.workflows.messages import Message as Message
from keel.workflows.messages import TokenUsage as TokenUsage
from keel.workflows.messages import ToolResult as ToolResult
from keel.workflows.messages import ToolUse as ToolUse
from keel.workflows.messages import text_block as text_block
from keel.workflows.replay_contracts import Divergence as Divergence
from keel.workflows.session import AgentSession as AgentSession
from keel.workflows.tool_policies import Verdict as Verdict
from keel.workflows.tool_policies import tool_policy as tool_policy

__version__: str
