"""How a session's run begins: its start input decoded, and the ledger it starts from.

A new session starts from its start input (settings, an imported conversation, a first
prompt); a continued run from the ledger its previous run handed over. A start input that is
missing or does not validate, carried state a client sent, an imported history or a prompt
that breaks the limits: each is a start error (``SessionStart.error``), which fails the
session at once (``AgentSession.run``), never its workflow task; queries still answer, on an
empty ledger and ``NO_CONFIG``.

Pure module: workflow code.
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import workflow

from keel.workflows.boundary import InputRejected, normalise_history, validate_prompt
from keel.workflows.ledger import NO_CONFIG, Ledger, SessionInput
from keel.workflows.limits import LIMITS_PATCH
from keel.workflows.raw_inputs import RawInput, decode


@dataclass
class SessionStart:
    """What a run begins with.

    Attributes:
        input: the start input (``SessionInput(config=NO_CONFIG)`` when it could not be read).
        ledger: the previous run's ledger, or a new one.
        error: why the session must fail at once, if it must.
    """

    input: SessionInput
    ledger: Ledger
    error: str | None = None


def session_start(raw: RawInput[SessionInput | None]) -> SessionStart:
    """Decode the start input and make the ledger the run begins from."""
    try:
        start = decode(raw, SessionInput, "AgentSession start input")
    except InputRejected as err:
        if workflow.info().continued_run_id is not None:
            # the previous run wrote it: a worker that cannot read it has a bug, and the
            # task is retried until a fixed worker can
            raise
        return SessionStart(SessionInput(config=NO_CONFIG), Ledger(), str(err))
    ledger, error = _starting_ledger(start)
    return SessionStart(start, ledger, error)


def _starting_ledger(input: SessionInput) -> tuple[Ledger, str | None]:
    """The previous run's ledger, or a new one; and the start error, if any."""
    if input.carried is not None:
        if workflow.info().continued_run_id is None:
            # S1: carried state (a parked cycle, queued prompts) is trusted only when this
            # session's previous run handed it over; a client cannot forge it at start.
            return Ledger(), "carried state is accepted only from continue-as-new"
        return input.carried, None
    try:
        ledger = Ledger.starting_with(normalise_history(input.messages))
    except InputRejected as err:
        return Ledger(), f"imported history rejected: {err}"
    error = None
    if input.prompt is not None:
        try:
            try:
                validate_prompt("user", input.prompt)
            except InputRejected:
                # a start input from before the limits is held to the limit it was
                # accepted under; the patch is asked only for a prompt the limits refuse,
                # so a session within them records no marker
                if workflow.patched(LIMITS_PATCH):
                    raise
                validate_prompt("user", input.prompt, earlier_limit=True)
        except InputRejected as err:
            error = f"start prompt rejected: {err}"
        else:
            ledger.enqueue(input.prompt)
    ledger.single_turn = input.single_turn
    ledger.parent_session = input.parent_session
    parent = workflow.info().parent
    if input.ancestors and parent is not None and parent.workflow_id == input.ancestors[0]:
        # a signature for an ancestor counts here only in a session an ancestor started,
        # and so do the standing approvals its parent hands down
        ledger.ancestors = input.ancestors
        ledger.standing = {approval.tool: approval for approval in input.standing}
    return ledger, error
