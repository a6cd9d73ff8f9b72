"""The ``KeelStatus`` search attribute: whether a session works, waits for a person, or idles.

Operators list sessions with Temporal's own tools by it::

    temporal workflow list --query 'KeelStatus="waiting" AND ExecutionStatus="Running"'

``running``: a turn works (or one is queued); ``waiting``: an approval or question is open
for a person; ``idle``: between turns. It is a Keyword search attribute that the namespace
must have (``keel dev`` registers it; on a cluster an operator creates it,
docs/deployment.md). Upserting one the namespace lacks fails the workflow task, so a session
keeps it current only when its start carried it: clients set ``KeelStatus=running`` on the
sessions they start once they found the namespace has it (``keel.worker.client.status_attribute``);
a session started without it (a raw start, a server without it) has no status and works the
same. Continue-as-new and the server keep the attribute of the run before.

Each upsert is a command in the history, so the session upserts only when the status
changes, and once at the start of each continued run (see ``StatusAttribute``).

Also the labels of Temporal's UI (activity summaries): the model, the tool, the sub-agent,
kept short and free of a spec's options.

Pure module: imported by workflow code (and by clients and the dev server, for the key).
"""

from __future__ import annotations

from typing import Literal

from temporalio import workflow
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from keel.workflows.ledger import Ledger

KEEL_STATUS = SearchAttributeKey.for_keyword("KeelStatus")
"""The session's status, for ``temporal workflow list --query 'KeelStatus="waiting"'``."""

KEEL_STATUS_TYPE = "Keyword"
"""Its type, as ``temporal operator search-attribute create --type`` spells it."""

Status = Literal["running", "waiting", "idle"]
STARTING: Status = "running"

# A summary is a label in Temporal's UI, not a record: this long at most.
SUMMARY_CHARS = 120


def session_status(ledger: Ledger) -> Status:
    """What a session does now, as ``KeelStatus`` says it.

    ``waiting`` while any interrupt (approval or question, its own or a sub-agent's shown
    here) is open, even while a judge in the gate considers it; ``running`` while a turn
    runs or one is queued; else ``idle`` (a closed session too).
    """
    if ledger.pending_interrupts():
        return "waiting"
    if ledger.current_turn is not None or ledger.queue:
        return "running"
    return "idle"


def starting_attributes() -> TypedSearchAttributes:
    """The search attributes a session starts with on a namespace that has ``KeelStatus``."""
    return TypedSearchAttributes([SearchAttributePair(KEEL_STATUS, STARTING)])


def child_attributes() -> TypedSearchAttributes | None:
    """What a child session starts with: ``KeelStatus`` when this workflow carries it.

    Call it from workflow code. That the parent carries it proves the namespace has it.
    """
    if workflow.info().typed_search_attributes.get(KEEL_STATUS) is None:
        return None
    return starting_attributes()


class StatusAttribute:
    """Keeps a session's ``KeelStatus`` current, when its start carried one.

    Deterministic: whether to upsert depends only on the run's start event (its search
    attributes) and the session's state.
    """

    def __init__(self) -> None:
        """Read the status this run started with (None: the session keeps none)."""
        info = workflow.info()
        self._shown: str | None = info.typed_search_attributes.get(KEEL_STATUS)
        # A continued run's first workflow task may have no command of its own (a session
        # parked for a person, or idle). Replayed after a cache miss, such a task is merged
        # with the next one, whose decision or prompt the session then sees before it first
        # shows its status: the status upsert would come before another command on one
        # replay and after it on another. One upsert in that first task, changed or not,
        # keeps the tasks apart (as ``keel_interrupts_opened`` does for a task that opens
        # an interrupt). A new session's first task always has a command.
        self._force = self._shown is not None and info.continued_run_id is not None

    def show(self, ledger: Ledger) -> None:
        """Upsert the session's status if it has one and it changed (or a run just began)."""
        if self._shown is None:
            return
        status = session_status(ledger)
        if status != self._shown or self._force:
            workflow.upsert_search_attributes([KEEL_STATUS.value_set(status)])
            self._shown = status
            self._force = False


def short(text: str) -> str:
    """A summary cut to ``SUMMARY_CHARS``."""
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def model_label(spec: str) -> str:
    """A model spec as Temporal's UI shows it: no options (``?...``), no folders.

    ``bedrock:anthropic.claude-v2?region=us-east-1`` -> ``bedrock:anthropic.claude-v2``;
    ``scripted:/tmp/x/approval.json`` -> ``scripted:approval.json``; an ARN keeps its last
    part (no account id).
    """
    prefix, sep, rest = spec.partition(":")
    if not sep:
        prefix, rest = "", spec
    rest = rest.partition("?")[0].partition("#")[0]
    rest = rest.rstrip("/").rpartition("/")[2] or rest
    return short(f"{prefix}:{rest}" if prefix else rest)


def tool_summary(name: str) -> str:
    """The summary of a tool run: ``tool write_file``."""
    return short(f"tool {name}")


def model_summary(spec: str) -> str:
    """The summary of a model call: ``model bedrock:<model-id>``."""
    return short(f"model {model_label(spec)}")
