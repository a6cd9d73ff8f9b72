"""Keel's web page for the people who approve: sessions, live progress, approve / deny / answer.

``keel ui`` (and ``keel dev``) serve it; see docs/ui.md. Modules by concern: ``app`` (routes
and headers), ``access`` (token, session cookie, CSRF), ``pages`` and ``live`` (what is shown,
and its live updates), ``actions`` (what a person does), ``views`` (the data shown),
``source`` (the client, the signing key), ``problems`` (errors in words), ``serving``
(uvicorn). Templates and static files are package data.
"""

from worker.ui.app import create_app
from worker.ui.serving import DEFAULT_HOST, DEFAULT_PORT, UiBindError, check_bind, ui_running
from worker.ui.source import KeelSource, Signer, TemporalDown

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "KeelSource",
    "Signer",
    "TemporalDown",
    "UiBindError",
    "check_bind",
    "create_app",
    "ui_running",
]
