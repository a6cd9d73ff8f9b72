"""What every handler of the web page shares: the client, the access rules, the templates."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from keel.worker.ui.access import Access, Visit
from keel.worker.ui.source import KeelSource, Signer, approver_for
from keel.workflows.contracts import SessionConfig

# The parts of the session page that live updates replace, each its own template.
SESSION_PARTS = ("status", "pending", "conversation", "effects", "usage", "controls")


def templates() -> Environment:
    """The page templates (package data of ``keel.worker.ui``), HTML-escaped by default.

    The ``shell`` filter quotes a word of a command a person copies (``shlex.quote``).
    """
    env = Environment(
        loader=PackageLoader("keel.worker.ui", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["shell"] = shlex.quote
    return env


@dataclass
class UiContext:
    """The app's shared state.

    Attributes:
        source: where the ``KeelClient`` comes from.
        access: the token, cookie and CSRF rules.
        signer: the key decisions are signed with (``--key``), if any.
        approver: ``KEEL_UI_APPROVER``: who decides when the person gave no name.
        env: the templates.
    """

    source: KeelSource
    access: Access
    signer: Signer | None
    approver: str | None
    env: Environment

    def render(self, template: str, **values: Any) -> str:
        """A template rendered with ``values`` and what every page knows."""
        common = {
            "signer": self.signer,
            "token_mode": self.access.token is not None,
            "default_approver": self.approver,
        }
        return self.env.get_template(template).render(**common, **values)

    def identity(self, config: SessionConfig | None, visit: Visit) -> str | None:
        """Who this visitor's decisions are sent as (see ``approver_for``)."""
        if config is None:
            return visit.name or self.approver
        return approver_for(config, self.signer, visit.name, self.approver)
