"""Notifications: a JSON POST to each ``SessionConfig.notify`` URL when a person is needed.

Three events: ``interrupt`` when an interrupt opens (an approval or a tool's question), with
the command that decides it; ``interrupt_escalated`` when one still pending reaches a step of
the session's escalation (``keel.workflows.escalation``), naming the approvers who may decide
it from then on; and ``turn_ended`` when a turn completes, fails or is cancelled.
Each event has an ``id`` unique in the session (the same on every attempt, so a receiver can
drop duplicates) and a one-line ``text``, so a Slack incoming webhook takes it as it is.

Delivery is the activity ``keel.notify.post`` (``keel.activities.notify``), with the timeouts and
retries of ``keel.workflows.activity_options``. The session never waits for it in a turn: the
activity runs in a task of its own while the turn goes on, and a failure is logged and shown
in the event log (``notification_failed``), never raised. Undelivered notifications are
kept in ``Ledger.outbox`` until their activity ends, so nothing is abandoned on the way:

- continue-as-new hands the outbox to the next run, which posts them again (a POST in flight
  at that moment may reach the receiver twice: drop duplicates by ``id``);
- a session that ends (``close``, or a single-turn session such as a scheduled job) waits for
  its outbox to empty first, at most ``NOTIFY_SCHEDULE_TO_CLOSE``.

Pure module: imported by workflow code.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from keel.workflows.activity_contracts import NotifyRequest, NotifyResponse
    from keel.workflows.activity_options import (
        NOTIFY_ACTIVITY,
        NOTIFY_RETRY,
        NOTIFY_SCHEDULE_TO_CLOSE,
        NOTIFY_START_TO_CLOSE,
    )
    from keel.workflows.contracts import Interrupt, Notification, SessionConfig, TurnRecord
    from keel.workflows.cycle import text_of
    from keel.workflows.interrupt_kinds import Verb, fields, kind_of
    from keel.workflows.ledger import Ledger

# How much of the turn's last answer a ``turn_ended`` event carries.
ANSWER_CHARS = 500
# How much of a tool input or an answer the one-line ``text`` quotes.
TEXT_QUOTE_CHARS = 200
_SHELL_SAFE = re.compile(r"^[A-Za-z0-9_./:=@%+,-]+$")


def _quoted(word: str) -> str:
    """A word as a POSIX shell reads it back (``shlex.quote``, which workflows may not import)."""
    if _SHELL_SAFE.match(word):
        return word
    return "'" + word.replace("'", "'\"'\"'") + "'"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def where(url: str) -> str:
    """A URL as the event log shows it: scheme and host only (a webhook URL is a secret)."""
    match = re.match(r"^(https?://[^/?#]+)", url)
    return match.group(1) if match else "?"


def _verb_command(verb: Verb, session: str, interrupt_id: str) -> str:
    """``keel VERB SESSION ID [ARG]`` for a notification, the session quoted for a shell."""
    arg = f" {_quoted(verb.placeholder)}" if verb.placeholder else ""
    return f"keel {verb.name} {session} {interrupt_id}{arg}{verb.suffix}"


def interrupt_event(session: str, interrupt: Interrupt, at: str) -> dict[str, Any]:
    """The ``interrupt`` event of an interrupt that just opened.

    Args:
        session: the session id.
        interrupt: the interrupt.
        at: the workflow time, ISO.
    """
    use, s, i = interrupt.tool_use, _quoted(session), interrupt.id
    quoted_input = _clip(json.dumps(use.input, sort_keys=True), TEXT_QUOTE_CHARS)
    spec = kind_of(interrupt)
    offered = {verb.name: _verb_command(verb, s, i) for verb in spec.offered()}
    command = offered[spec.verbs[0]]
    deny = offered.get("deny")
    text = spec.notice.format(
        **fields(interrupt), session=session, input=quoted_input, command=command
    )
    return {
        "id": f"{session}/interrupt/{i}",
        "event": "interrupt",
        "session": session,
        "workflow_id": session,
        "turn": interrupt.turn,
        "interrupt": i,
        "kind": interrupt.kind,
        "tool": use.name,
        "tool_use_id": use.toolUseId,
        "name": interrupt.name,
        "input": use.input,
        "reason": interrupt.reason,
        "expires_at": interrupt.expires_at,
        "command": command,
        "deny_command": deny,
        "resolve_command": offered.get("resolve"),
        "at": at,
        "text": text,
    }


def escalation_event(
    session: str, interrupt: Interrupt, approvers: list[str], at: str
) -> dict[str, Any]:
    """The ``interrupt_escalated`` event of an interrupt that reached an escalation step.

    The ``interrupt`` event's fields, with ``step`` (1 for the first), ``approvers`` (who
    the step added), ``may_decide`` (who may decide now; empty: anyone but those of later
    steps), ``next_escalation_at`` and ``next_approvers``.

    Args:
        session: the session id.
        interrupt: the interrupt, escalated.
        approvers: who the step added.
        at: the workflow time, ISO.
    """
    event = interrupt_event(session, interrupt, at)
    who = ", ".join(approvers)
    event.update(
        id=f"{session}/interrupt/{interrupt.id}/escalated/{interrupt.escalated}",
        event="interrupt_escalated",
        step=interrupt.escalated,
        approvers=list(approvers),
        may_decide=list(interrupt.may_decide),
        next_escalation_at=interrupt.next_escalation_at,
        next_approvers=list(interrupt.next_approvers),
        text=f"Escalated to {who} (nobody decided in time). {event['text']}",
    )
    return event


def turn_event(session: str, record: TurnRecord, at: str) -> dict[str, Any]:
    """The ``turn_ended`` event of a turn that completed, failed or was cancelled.

    Args:
        session: the session id.
        record: the ended turn.
        at: the workflow time, ISO.
    """
    answer = text_of(record.message)
    said = f": {record.error}" if record.error else ""
    if not said and answer:
        said = f": {_clip(' '.join(answer.split()), TEXT_QUOTE_CHARS)}"
    return {
        "id": f"{session}/turn/{record.turn_id}",
        "event": "turn_ended",
        "session": session,
        "workflow_id": session,
        "turn": record.turn_id,
        "status": record.status,
        "stop_reason": record.stop_reason,
        "usage": record.usage.model_dump(mode="json"),
        "answer": answer[:ANSWER_CHARS],
        "error": record.error,
        "at": at,
        "text": (
            f"Keel session {session}: turn {record.turn_id} {record.status} "
            f"({record.stop_reason}){said}"
        ),
    }


class Notifier:
    """The session's side of notifications: queue, post without waiting, drain at the end."""

    def __init__(self, config: SessionConfig, ledger: Ledger) -> None:
        """Post to ``config.notify``; keep what is on its way in ``ledger.outbox``."""
        self._config = config
        self._ledger = ledger
        # in flight in this run only: the delivery tasks (kept so none is garbage-collected)
        self._deliveries: set[asyncio.Task[None]] = set()

    def interrupt_opened(self, interrupt: Interrupt) -> None:
        """Post the ``interrupt`` event of an interrupt that just opened."""
        if self._config.notify:
            session = workflow.info().workflow_id
            self._notify(interrupt_event(session, interrupt, workflow.now().isoformat()))

    def interrupt_escalated(self, interrupt: Interrupt, approvers: list[str]) -> None:
        """Post the ``interrupt_escalated`` event of an interrupt that reached a step."""
        if self._config.notify:
            session = workflow.info().workflow_id
            at = workflow.now().isoformat()
            self._notify(escalation_event(session, interrupt, approvers, at))

    def turn_ended(self, record: TurnRecord) -> None:
        """Post the ``turn_ended`` event of a turn that has ended."""
        if self._config.notify and record.status in ("completed", "failed", "cancelled"):
            session = workflow.info().workflow_id
            self._notify(turn_event(session, record, workflow.now().isoformat()))

    def post_carried(self) -> None:
        """Post again what the previous run had not delivered when it continued-as-new."""
        for note in self._ledger.outbox:
            self._post(note)

    async def delivered(self) -> None:
        """Wait until no notification is on its way (each ends within its timeout)."""
        await workflow.wait_condition(lambda: not self._ledger.outbox)

    def _notify(self, event: dict[str, Any]) -> None:
        for index, url in enumerate(self._config.notify):
            note = Notification(key=f"{event['id']}#{index}", url=url, event=event)
            self._ledger.outbox.append(note)
            self._post(note)

    def _post(self, note: Notification) -> None:
        task = asyncio.create_task(self._deliver(note))
        self._deliveries.add(task)
        task.add_done_callback(self._deliveries.discard)

    async def _deliver(self, note: Notification) -> None:
        """One notification's activity; its outcome goes to the event log, never further."""
        ledger, event = self._ledger, note.event
        turn, kind, to = event.get("turn"), str(event.get("event")), where(note.url)
        try:
            response = await workflow.execute_activity(
                NOTIFY_ACTIVITY,
                NotifyRequest(url=note.url, event=event),
                result_type=NotifyResponse,
                start_to_close_timeout=NOTIFY_START_TO_CLOSE,
                schedule_to_close_timeout=NOTIFY_SCHEDULE_TO_CLOSE,
                retry_policy=NOTIFY_RETRY,
                summary=f"notify {kind} to {to}",
            )
        except ActivityError as err:
            cause: BaseException = err
            while isinstance(cause, ActivityError) and cause.cause is not None:
                cause = cause.cause
            error = str(cause) or type(cause).__name__
            workflow.logger.warning("notification %s to %s failed: %s", event.get("id"), to, error)
            ledger.emit("notification_failed", turn=turn, event=kind, to=to, error=error)
        else:
            ledger.emit(
                "notification_sent",
                turn=turn,
                event=kind,
                to=to,
                status=response.status,
                attempt=response.attempt,
            )
        finally:
            ledger.outbox = [n for n in ledger.outbox if n.key != note.key]
