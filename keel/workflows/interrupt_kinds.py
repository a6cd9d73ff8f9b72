"""The interrupt kinds, each declared once: what decides it, and how it is shown to a person.

The workflow's checks (which update a kind takes, which may stand for later calls, what the
model reads when it did not go ahead) and every view (the CLI's lines and commands, ``keel
run``'s progress line, the web page's heading and buttons, a notification's text and
commands, the session's status line) read a kind's declaration here instead of testing its
name. A new kind is its name in ``InterruptKind`` (``keel.workflows.contracts``), its
declaration in ``KINDS``, and the code that opens it; a new verb (the ``keel`` command that
decides it) also needs that command.

Pure module: imported by workflow code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from keel.workflows.contracts import Decision, Interrupt

# The update (and signal) a person's decision arrives by: ``decide`` carries a ``Decision``
# (approve or deny), ``respond`` an ``Answer`` (a value).
Update = Literal["decide", "respond"]


@dataclass(frozen=True)
class Verb:
    """A ``keel`` command that decides an interrupt: ``keel VERB SESSION ID [ARG] [SUFFIX]``.

    Attributes:
        name: the command (``approve``, ``deny``, ``respond``).
        update: the update it sends.
        placeholder: the argument a person fills in, shown as is (``respond``'s answer).
        suffix: what the offered line ends with, for the person to edit (``--reason '...'``).
    """

    name: str
    update: Update
    placeholder: str | None = None
    suffix: str = ""


VERBS: dict[str, Verb] = {
    "approve": Verb("approve", "decide"),
    "deny": Verb("deny", "decide", suffix=" --reason '...'"),
    "respond": Verb("respond", "respond", placeholder="<answer: JSON or text>"),
    "resolve": Verb("resolve", "decide", suffix=" --result '...'"),
}


@dataclass(frozen=True)
class KindSpec:
    """One interrupt kind, as the workflow checks it and as the views show it.

    Text templates are ``str.format`` strings over ``fields(interrupt)`` (``id``, ``tool``,
    ``tool_use_id``, ``name``, ``reason``) and, where said, more.

    Attributes:
        name: the kind (``Interrupt.kind``).
        noun: the kind with its article, as a refusal names it (``an approval``).
        verbs: the commands that decide it, in the order they are offered (``VERBS``); a
            ``decide`` update's ``decision`` must be one of them.
        standing: an approval of it may stand for the tool's later calls (``--always``).
        heading: how the CLI heads it for a person.
        waiting: the session's status line while it waits.
        progress: how ``keel run``'s progress lines announce it (``interrupt_created``),
            followed by ``: TOOL (interrupt ID)``.
        page_heading: the web page's heading; ``{tool}`` is shown as code.
        notice: a notification's text; also ``{session}``, ``{input}`` (the tool input as
            JSON, clipped) and ``{command}`` (the first verb's command).
        model_texts: what the model reads when it closes without going ahead, by status
            (``*``: any other); also ``{who}`` (`` by APPROVER`` or nothing) and ``{why}``.
        extends: approving it may grant an amount (``Decision.extend``: ``--extend N``).
    """

    name: str
    noun: str
    verbs: tuple[str, ...]
    standing: bool
    heading: str
    waiting: str
    progress: str
    page_heading: str
    notice: str
    model_texts: Mapping[str, str]
    extends: bool = False

    @property
    def update(self) -> Update:
        """The update a decision of this kind arrives by (that of its verbs)."""
        return VERBS[self.verbs[0]].update

    def offered(self) -> list[Verb]:
        """The commands a person is offered, in order."""
        return [VERBS[verb] for verb in self.verbs]

    def model_text(self, interrupt: Interrupt, **more: Any) -> str:
        """What the model reads for an interrupt of this kind that closed without going ahead."""
        template = self.model_texts.get(interrupt.status) or self.model_texts["*"]
        return template.format(**fields(interrupt), **more)


KINDS: dict[str, KindSpec] = {
    "approval": KindSpec(
        name="approval",
        noun="an approval",
        verbs=("approve", "deny"),
        standing=True,
        heading="waiting for approval: {reason}",
        waiting="waiting for approval: {name}, interrupt {id}",
        progress="approval needed",
        page_heading="Approve {tool}?",
        notice=(
            "Keel session {session} waits for approval: {reason}: {tool} {input}. "
            "Approve: {command}"
        ),
        model_texts={
            "timed_out": "tool use {name!r} was not approved in time and did not run: {why}",
            "cancelled": "tool use {tool!r} did not run: {why}",
            "*": "tool use {tool!r} was denied{who} and did not run: {why}",
        },
    ),
    "question": KindSpec(
        name="question",
        noun="a question",
        verbs=("respond",),
        standing=False,
        heading="question from tool {tool!r} ({name}): {reason}",
        waiting="waiting for an answer: {tool} asks {name!r}, interrupt {id}",
        progress="answer needed",
        page_heading="{tool} asks: {name}",
        notice="Keel session {session}: tool {tool} asks ({name}): {reason}. Answer: {command}",
        model_texts={
            "timed_out": "tool {tool!r} asked {name!r} and got no answer in time: {why}",
            "*": "tool {tool!r} asked {name!r} and got no answer: {why}",
        },
    ),
    "outcome_unknown": KindSpec(
        name="outcome_unknown",
        noun="an unknown outcome",
        verbs=("approve", "deny", "resolve"),
        standing=False,
        heading="outcome unknown: {reason}",
        waiting="outcome unknown: did {tool} run? interrupt {id}",
        progress="outcome unknown, a person decides whether it runs again",
        page_heading="Did {tool} happen?",
        notice=(
            "Keel session {session}: {reason}: {tool} {input}. Run it again: {command}; "
            "or deny, or record its result with keel resolve"
        ),
        model_texts={
            "timed_out": (
                "tool {tool!r} may or may not have run (an attempt ended without a result); "
                "nobody decided in time, so it was not run again: {why}"
            ),
            "cancelled": "tool {tool!r} may or may not have run, and was not run again: {why}",
            "*": (
                "tool {tool!r} may or may not have run (an attempt ended without a result); "
                "it was not run again, denied{who}: {why}"
            ),
        },
    ),
    "budget": KindSpec(
        name="budget",
        noun="a budget",
        verbs=("approve", "deny"),
        standing=False,
        heading="budget reached: {reason}",
        waiting="budget reached, waiting for a person: {reason}, interrupt {id}",
        progress="budget reached, a person decides whether the turn goes on",
        page_heading="Reached a {tool}: spend more?",
        notice=(
            "Keel session {session} reached a budget: {reason}. Grant as much again: "
            "{command} (or --extend N); deny ends the turn"
        ),
        model_texts={"*": "the turn stopped at its budget ({name}): {why}"},
        extends=True,
    ),
}


def kind_of(interrupt: Interrupt) -> KindSpec:
    """The declaration of an interrupt's kind."""
    return KINDS[interrupt.kind]


def fields(interrupt: Interrupt) -> dict[str, Any]:
    """What the text templates of a kind name: its id, tool, tool_use_id, name and reason."""
    return {
        "id": interrupt.id,
        "tool": interrupt.tool_use.name,
        "tool_use_id": interrupt.tool_use.toolUseId,
        "name": interrupt.name,
        "reason": interrupt.reason,
    }


def refusal(interrupt: Interrupt, update: Update) -> str | None:
    """Why an update does not decide an interrupt of this kind; None when it does.

    Example:
        ``interrupt 'abc' is a question; use respond`` for a ``decide`` naming a question.
    """
    spec = kind_of(interrupt)
    if spec.update == update:
        return None
    return f"interrupt {interrupt.id!r} is {spec.noun}; use {spec.update}"


def decision_refusal(interrupt: Interrupt, decision: Decision) -> str | None:
    """Why a ``decide`` does not fit an interrupt of this kind; None when it does.

    Its ``decision`` must be one of the kind's verbs; ``resolve`` carries a ``result`` and
    nothing else does; ``always`` only where an approval of the kind may stand.
    """
    spec = kind_of(interrupt)
    if decision.decision not in spec.verbs:
        offered = ", ".join(v for v in spec.verbs if VERBS[v].update == "decide")
        return (
            f"interrupt {interrupt.id!r} is {spec.noun}: {decision.decision} does not "
            f"decide it; use {offered}"
        )
    if decision.decision == "resolve" and decision.result is None:
        return "resolve needs the tool's result (result)"
    if decision.decision != "resolve" and decision.result is not None:
        return f"a result is recorded with resolve, not {decision.decision}"
    if decision.extend is not None and not (spec.extends and decision.decision == "approve"):
        return f"interrupt {interrupt.id!r} is {spec.noun}; extend only approves a budget"
    if decision.always and not spec.standing:
        return f"interrupt {interrupt.id!r} is {spec.noun}; an approval of it cannot stand (always)"
    return None
