"""Keel's web page for the people who approve: sessions, live progress, approve / deny / answer.

``keel ui`` (and ``keel dev``) serve it; see docs/ui.md. Modules by concern: ``app`` (routes
and headers), ``access`` (token, session cookie, CSRF), ``pages`` and ``live`` (what is shown,
and its live updates), ``actions`` (what a person does), ``views`` (the data shown),
``source`` (the client, the signing key), ``problems`` (errors in words), ``serving``
(uvicorn). Templates and static files are package data.

Internal to Keel: what users need is imported from ``keel`` (``keel/__init__.py``).
"""
