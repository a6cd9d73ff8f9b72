"""Following a session live: its event log and its streamed model text, printed as they come.

``keel watch`` prints every event; ``keel run`` (and approve, deny, cancel) print progress
lines for their own turn. Both poll the ``state`` query for events, and read the text a model
streams from the worker's stream endpoint (``SessionReader.model_text``, falling back to the
model activity's heartbeat details); nothing here writes to workflow history.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import weakref
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TextIO

from keel.worker.background import stop_task
from keel.worker.client.effects_listing import retried_text
from keel.worker.client.errors import SessionNotFound
from keel.worker.client.keel_client import KeelClient
from keel.worker.client.streams import TextChunk
from keel.workflows.contracts import Event, SessionState, TurnRecord
from keel.workflows.cost import dollars
from keel.workflows.interrupt_kinds import KINDS
from keel.workflows.turn_waits import TURN_SETTLED

# How long an event that ends a model call waits for the last of that call's text.
TEXT_END_WAIT_S = 1.0
# How often the text of a model call that started checks that its events were asked for.
NUDGE_CHECK_S = 0.01

logger = logging.getLogger(__name__)
# Printers whose last output is streamed text without its newline (see end_streamed_line).
_OPEN_LINES: weakref.WeakSet[StreamedText] = weakref.WeakSet()


def _clock(at: str) -> str:
    """An event's ISO time as local ``HH:MM:SS``."""
    try:
        return datetime.fromisoformat(at).astimezone().strftime("%H:%M:%S")
    except ValueError:
        return at


def _tokens(usage: Any) -> str:
    if not isinstance(usage, Mapping):
        return "? tokens"
    return tokens_text(usage.get("inputTokens", 0), usage.get("outputTokens", 0), usage)


def _call_cost(detail: Mapping[str, Any]) -> str:
    """``, $0.0042`` for a model call whose cost is known (``cost_usd``); else nothing."""
    cost = detail.get("cost_usd")
    return f", {dollars(cost)}" if isinstance(cost, int | float) else ""


def tokens_text(inputs: object, outputs: object, usage: Any) -> str:
    """``N in / M out tokens``; ``tokens unknown`` when the model server reported none.

    Args:
        inputs: input tokens.
        outputs: output tokens.
        usage: the usage (a ``TokenUsage`` or its dict): its ``unknown`` marks counts the
            server did not report, which a sum then leaves out.
    """
    unknown = usage.get("unknown") if isinstance(usage, Mapping) else usage.unknown
    if not unknown:
        return f"{inputs} in / {outputs} out tokens"
    if not inputs and not outputs:
        return "tokens unknown (not reported by the model server)"
    return f"{inputs} in / {outputs} out tokens, and some the model server did not report"


def _error_of(event: Event, turns: Mapping[int, TurnRecord]) -> str | None:
    record = turns.get(event.turn) if event.turn is not None else None
    return record.error if record is not None else None


def event_details(event: Event, turns: Mapping[int, TurnRecord] | None = None) -> str:
    """The useful details of an event, as a short phrase (empty when there are none).

    Args:
        event: the event.
        turns: turn records by id, to name why a turn failed (the event does not say).
    """
    d, turns = event.detail, turns or {}
    match event.type:
        case "model_called":
            return f"{d.get('stop_reason')}, {_tokens(d.get('usage'))}{_call_cost(d)}"
        case "tool_started":
            return f"{d.get('tool')} ({d.get('id')})"
        case "tool_finished":
            return f"{d.get('tool')} ({d.get('id')}): {d.get('status')}"
        case "tool_retried":
            return f"{d.get('tool')} ({d.get('id')}): {retried_text(d)}"
        case "message_added":
            return f"{d.get('role')} message #{d.get('index')}"
        case "interrupt_created":
            return f"{d.get('kind')} {d.get('id')} for {d.get('tool')} ({d.get('tool_use_id')})"
        case "interrupt_decided":
            by = f" by {d['by']}" if d.get("by") else ""
            return f"{d.get('id')} {d.get('status')}{by}"
        case "interrupt_escalated":
            return _escalated(d)
        case "turn_ended":
            error = _error_of(event, turns) if d.get("status") != "completed" else None
            text = f"{d.get('status')} ({d.get('stop_reason')})"
            return f"{text}: {error}" if error else text
        case "steering_added":
            return f"{d.get('count')} guidance text(s) given to the model"
        case "steering_dropped":
            count = d.get("count", len(d.get("texts") or []))  # texts: events from before
            return f"{count} guidance text(s) dropped: the turn ended"
        case "notification_sent":
            answer = f"HTTP {d.get('status')}, attempt {d.get('attempt')}"
            return f"{d.get('event')} to {d.get('to')}: {answer}"
        case "notification_failed":
            return f"{d.get('event')} to {d.get('to')} not delivered: {d.get('error')}"
    return ", ".join(f"{key}={value}" for key, value in d.items())


def _escalated(d: Mapping[str, object]) -> str:
    """An ``interrupt_escalated`` event's phrase: the interrupt, who may decide it now, next."""
    approvers = d.get("approvers")
    who = ", ".join(str(a) for a in approvers) if isinstance(approvers, list) else "?"
    then = f"; next step at {d['next_at']}" if d.get("next_at") else ""
    return f"{d.get('id')} escalated to {who} (step {d.get('step')}){then}"


def event_line(event: Event, turns: Mapping[int, TurnRecord] | None = None) -> str:
    """One event as ``keel watch`` prints it: time, turn/cycle, type, details."""
    where = "-"
    if event.turn is not None:
        where = f"t{event.turn}" + (f".c{event.cycle}" if event.cycle is not None else "")
    details = event_details(event, turns)
    line = f"{_clock(event.at)} {event.seq:>4} {where:<7} {event.type:<17}"
    return f"{line} {details}".rstrip()


def progress_line(event: Event, turns: Mapping[int, TurnRecord] | None = None) -> str | None:
    """One event as ``keel run`` reports progress, or None for events it does not report."""
    d = event.detail
    match event.type:
        case "model_called":
            spent = f"{_tokens(d.get('usage'))}{_call_cost(d)}"
            return f"model call {event.cycle} -> {d.get('stop_reason')} ({spent})"
        case "tool_started":
            return f"tool {d.get('tool')} started"
        case "tool_finished":
            return f"tool {d.get('tool')} finished: {d.get('status')}"
        case "tool_retried":
            return f"tool {d.get('tool')} {retried_text(d)}"
        case "interrupt_created":
            kind = KINDS.get(str(d.get("kind")))  # a kind this client does not know: its name
            needed = kind.progress if kind is not None else f"{d.get('kind')} needed"
            return f"{needed}: {d.get('tool')} (interrupt {d.get('id')})"
        case "interrupt_decided":
            by = f" by {d['by']}" if d.get("by") else ""
            return f"interrupt {d.get('id')} {d.get('status')}{by}"
        case "interrupt_escalated":
            return f"interrupt {_escalated(d)}"
        case "steering_added":
            return "guidance given to the model"
        case "turn_ended":
            return f"turn {event.turn} {event_details(event, turns)}"
    return None


def end_streamed_line(out: TextIO) -> None:
    """End a line of streamed text left open on ``out``, before a notice is printed there."""
    for printer in list(_OPEN_LINES):
        if printer.out is out:
            printer.end_line()


class StreamedText:
    """Prints the text model calls stream (``TextChunk``s), each character once, in order.

    A new model call (or a retry) starts on its own line. Text that the heartbeat fallback
    could not deliver (``gap``) is marked with ``…``; from a worker's stream endpoint, none is
    missing.
    """

    def __init__(self, out: TextIO, *, dim: bool = False) -> None:
        """Print to ``out``; ``dim`` greys the text (for a terminal)."""
        self.out = out
        self.dim = dim
        self._call: tuple[str, int] | None = None
        self._open = False  # the last thing written was streamed text without a newline

    def write(self, chunk: TextChunk) -> None:
        """Print a chunk's text, after ending the line of another call's text."""
        call = (chunk.activity_id, chunk.attempt)
        if call != self._call:
            self.end_line()
            self._call = call
        if not chunk.text:
            return
        part = ("…" if chunk.gap else "") + chunk.text
        self.out.write(f"\x1b[2m{part}\x1b[0m" if self.dim else part)
        self.out.flush()
        self._open = not part.endswith("\n")
        if self._open:
            _OPEN_LINES.add(self)

    def end_line(self) -> None:
        """End a line of streamed text, so that what follows starts on its own line."""
        if self._open:
            self.out.write("\n")
            self.out.flush()
            self._open = False
            _OPEN_LINES.discard(self)


class Follower:
    """Follows one session from an event number on, printing as it goes.

    Attributes:
        since: events seen so far; following again continues from here.
    """

    def __init__(
        self,
        keel: KeelClient,
        session: str,
        since: int = 0,
        *,
        out: TextIO | None = None,
        style: str = "progress",
        turn: int | None = None,
        stream_text: bool = False,
        poll_s: float = 0.2,
    ) -> None:
        """Set up a follower.

        Args:
            keel: the client.
            session: the session to follow.
            since: the number of events already seen.
            out: where to print; None prints nothing.
            style: ``progress`` (``keel run``), ``events`` (``keel watch``) or ``json``
                (one event object per line).
            turn: print only this turn's events.
            stream_text: also print the text model calls stream (not in ``json`` style).
            poll_s: seconds between polls.
        """
        self.keel = keel
        self.session = session
        self.since = since
        self.out = out
        self.style = style
        self.turn = turn
        self.poll_s = poll_s
        self.text: StreamedText | None = None
        if out is not None and stream_text and style != "json":
            self.text = StreamedText(out, dim=out.isatty())
        # The (turn, cycle) of the model call whose text is being printed, until its end.
        self._streaming: tuple[int | None, int | None] | None = None
        self._stream_ended = asyncio.Event()
        self._polled = asyncio.Event()  # set, and replaced, after each poll's events
        self._look_now = asyncio.Event()  # set: the state is asked now (a model call started)

    async def turn_settled(self, turn_id: int) -> TurnRecord:
        """Follow until the turn has ended or waits for a human; returns its record."""
        settled: TurnRecord | None = None

        def stop(state: SessionState) -> bool:
            nonlocal settled
            record = next((t for t in state.turns if t.turn_id == turn_id), None)
            if record is not None and record.status in TURN_SETTLED:
                settled = record
            return settled is not None

        await self.follow(stop)
        if settled is None:  # the session stopped running before the turn settled
            return await self.keel.turn(self.session, turn_id)
        return settled

    async def follow(
        self, stop: Callable[[SessionState], bool] | None = None
    ) -> SessionState | None:
        """Print events until ``stop(state)`` is true or the session stops; the last state.

        The text model calls stream is printed as it arrives, by a task of its own.
        """
        last: SessionState | None = None
        text = None if self.text is None else asyncio.create_task(self._print_text(self.text))
        try:
            states = self.keel.snapshots(
                self.session, self.since, poll_s=self.poll_s, stop=stop, nudge=self._look_now
            )
            async for state in states:
                last = state
                self.since = max(self.since, state.event_count)
                await self._text_before(state.events)
                self.print_events(state)
                self._polled.set()
                self._polled = asyncio.Event()
                if stop is not None and stop(state):
                    break
        finally:
            if text is not None:
                await self._call_text_ended()
                await stop_task(text)
        if self.text is not None:
            self.text.end_line()
        return last

    def print_events(self, state: SessionState) -> None:
        """Print a state's (new) events in this follower's style."""
        if self.out is None:
            return
        turns = {t.turn_id: t for t in state.turns}
        for event in state.events:
            if self.turn is not None and event.turn != self.turn:
                continue
            if self.style == "json":
                line: str | None = json.dumps(event.model_dump(mode="json"))
            elif self.style == "events":
                line = event_line(event, turns)
            else:
                line = progress_line(event, turns)
            if line is None:
                continue
            if self.text is not None:
                self.text.end_line()
            print(line, file=self.out, flush=True)

    async def _print_text(self, printer: StreamedText) -> None:
        """Print the text of the session's model calls (of this follower's turn) as it comes."""
        call: tuple[str, int] | None = None
        try:
            async for chunk in self.keel.model_text(self.session, poll_s=self.poll_s):
                if self.turn is not None and chunk.turn not in (None, self.turn):
                    continue
                if (chunk.activity_id, chunk.attempt) != call:
                    call = (chunk.activity_id, chunk.attempt)
                    await self._events_before()
                if chunk.end:
                    self._streaming = None
                    self._stream_ended.set()
                elif chunk.text:
                    self._streaming = (chunk.turn, chunk.cycle)
                    self._stream_ended.clear()
                printer.write(chunk)
        except SessionNotFound:
            return  # the event loop says so
        except Exception as err:  # streamed text is a nicety; a failed read is not an error
            logger.info("stopped following the text of session %s: %s", self.session, err)

    async def _events_before(self) -> None:
        """Let the events from before a model call started be printed before its text.

        Asks for the state now, and waits (briefly) until the events of a query sent after
        the call had started are printed.
        """
        self._look_now.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(TEXT_END_WAIT_S):
                while self._look_now.is_set():  # cleared as that query is sent
                    await asyncio.sleep(NUDGE_CHECK_S)
                await self._polled.wait()

    async def _text_before(self, events: list[Event]) -> None:
        """Let the text of a model call end before the event that says the call ended."""
        if self._streaming is None:
            return
        if any(e.type == "model_called" and (e.turn, e.cycle) == self._streaming for e in events):
            await self._call_text_ended()

    async def _call_text_ended(self) -> None:
        """Wait (briefly) until the text of the call being printed has ended."""
        if self._streaming is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TEXT_END_WAIT_S):
                    await self._stream_ended.wait()
