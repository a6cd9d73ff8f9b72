"""What is known of a tool call's effect on the world: its attempts and how it was settled.

A ``write`` or ``idempotent`` tool's runs are journaled by the worker, in the conversation
store, under the call's idempotency key (``keel.activities.effects_journal``): each attempt
when it starts the tool's body and when (and how) it ends, and the call's response once it has
one. The tool activity reports what the journal holds (``EffectReport``); the session keeps one
``EffectRecord`` per call, with how it was settled and by whom, for ``keel effects``.

Pure module: imported by workflow code.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from keel.workflows.contracts import Effect, KeelModel

# How an attempt of a tool's body ended; None while it runs, or when it never said (its
# worker died, its heartbeat or Temporal's timeout ran out: the outcome is unknown).
AttemptEnd = Literal["returned", "raised", "asked", "timed_out", "cancelled"]
# How a call was settled, as ``keel effects`` says it:
#   done        it ran, and returned (once, or again after a crash before its body started);
#   failed      it raised: a known outcome, its error went to the model;
#   unknown     an attempt ended without a result and nothing settled it (yet);
#   reconciled  its ``reconcile`` function found the effect had happened, and gave the result;
#   resolved    a person recorded its result (``keel resolve``) without running it again;
#   retried     it ran again after an unknown outcome: ``idempotent``, or ``write`` once a
#               person approved or ``reconcile`` found no effect;
#   denied      a person denied running it again: the model got an error result;
#   recorded    the journal already held its result (a reset, a lost response): not run.
EffectOutcome = Literal[
    "done", "failed", "unknown", "reconciled", "resolved", "retried", "denied", "recorded"
]


class EffectAttempt(KeelModel):
    """One run of a tool's body, as the worker's journal holds it.

    Attributes:
        attempt: its number among this call's runs, from 1.
        started_at: when the body was about to run (ISO time, the worker's clock).
        ended_at: when it ended, if it said.
        ended: how it ended; None when it never said.
        worker: the Temporal identity of the worker that ran it.
    """

    attempt: int = Field(ge=1)
    started_at: str
    ended_at: str | None = None
    ended: AttemptEnd | None = None
    worker: str = ""


class EffectReport(KeelModel):
    """What the tool activity tells the session of a journaled call's effect.

    Attributes:
        effect: the tool's class, as this run treated it.
        outcome: how this run settled the call; ``unknown`` when it did not call the tool
            because an earlier attempt may have had its effect (the session asks a person).
        attempts: the call's attempts so far, oldest first.
        last_ended: for ``unknown`` and ``retried``, how the earlier attempt ended, in words.
        reconcile_error: for ``unknown``, why the tool's ``reconcile`` could not tell.
    """

    effect: Effect
    outcome: EffectOutcome
    attempts: list[EffectAttempt] = Field(default_factory=list)
    last_ended: str | None = None
    reconcile_error: str | None = None


class EffectRecord(KeelModel):
    """One call of a ``write`` or ``idempotent`` tool, as ``keel effects`` lists it.

    Attributes:
        tool: the tool's name.
        tool_use_id: the model's ``toolUseId``.
        idempotency_key: ``<session id>/<toolUseId>``, what the journal is keyed by.
        effect: the tool's class.
        turn: the turn that made the call (None for a plain call, listed from the
            conversation).
        attempts: the runs of its body, oldest first.
        outcome: how it was settled (``EffectOutcome``).
        decided_by: the person who settled it, when one did (approve, deny, resolve).
        interrupt_id: the ``outcome_unknown`` interrupt it was settled by, if any.
        settled: how many of its attempts a person settled by approving a run again.
    """

    tool: str
    tool_use_id: str
    idempotency_key: str
    effect: Effect
    turn: int | None = None
    attempts: list[EffectAttempt] = Field(default_factory=list)
    outcome: EffectOutcome
    decided_by: str | None = None
    interrupt_id: str | None = None
    settled: int = 0


class EffectsView(KeelModel):
    """Answer of the ``effects`` query: what the session knows of its journaled calls.

    A plain call (its body ran once and returned or raised) is not recorded in the session:
    its attempt is in the journal, and its result in the conversation. ``keel effects``
    (``keel.worker.client.effects_listing``) lists every call of a class in ``classes`` from
    the conversation, with these records and the journal's attempts.

    Attributes:
        effects: one record per call that was not plain, oldest first (the latest
            ``MAX_EFFECTS_KEPT``).
        dropped: how many older records were let go to keep the session's state bounded.
        classes: the session's ``write`` and ``idempotent`` tools, with their class.
    """

    effects: list[EffectRecord] = Field(default_factory=list)
    dropped: int = 0
    classes: dict[str, Effect] = Field(default_factory=dict)
