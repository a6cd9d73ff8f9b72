"""A worker's logs and SDK metrics.

Logs: every record gets ``session_id``, ``turn`` and ``cycle`` when it was written by a
session's workflow or one of its activities (see ``keel.worker.process.interceptors``);
``text`` shows them in brackets, ``json`` writes one JSON object per line.

Metrics: temporalio's Core exports its SDK metrics (``temporal_*``: task slots, poll and
schedule-to-start latencies, activity and workflow outcomes, ...) and Keel's counters
(``keel_model_calls``, ``keel_model_tokens``, ``keel_tool_runs``) in Prometheus text format.
The runtime doing so is process-wide: the client must be created with it.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from temporalio import activity, workflow
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from keel.worker.process.interceptors import log_fields
from keel.worker.settings import ConfigError

__all__ = [
    "ContextFilter",
    "JsonFormatter",
    "TextFormatter",
    "configure_logging",
    "metrics_runtime",
]

_CONTEXT_KEYS = ("session_id", "turn", "cycle", "activity", "attempt")


class ContextFilter(logging.Filter):
    """Adds ``session_id``, ``turn``, ``cycle`` (and ``activity``, ``attempt``) to records."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Set the fields (None when unknown); never drops a record."""
        fields = log_fields(getattr(record, "temporal_workflow", None))
        for key in _CONTEXT_KEYS:
            setattr(record, key, fields.get(key))
        return True


class TextFormatter(logging.Formatter):
    """``time level logger [session=.. turn=.. cycle=..]: message``."""

    def __init__(self) -> None:
        """The default text layout."""
        super().__init__("%(asctime)s %(levelname)s %(name)s%(keel_context)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        """Format with the context in brackets, when there is one."""
        parts = [
            f"{key}={getattr(record, name)}"
            for key, name in (("session", "session_id"), ("turn", "turn"), ("cycle", "cycle"))
            if getattr(record, name, None) is not None
        ]
        record.keel_context = f" [{' '.join(parts)}]" if parts else ""
        return super().format(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, context, exception."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in _CONTEXT_KEYS:
            value = getattr(record, key, None)
            if value is not None:
                out[key] = value
        temporal = getattr(record, "temporal_workflow", None) or getattr(
            record, "temporal_activity", None
        )
        if isinstance(temporal, dict):
            for key in ("workflow_id", "run_id", "activity_id", "task_queue"):
                if temporal.get(key) is not None:
                    out[key] = temporal[key]
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def configure_logging(log_format: str = "text", level: str | None = None) -> None:
    """Give the root logger's handlers Keel's context filter and formatter.

    Args:
        log_format: ``text`` or ``json``. With ``json``, temporalio's loggers stop
            appending their info dict to messages: it is in the fields.
        level: the root level (``INFO`` ...); None keeps the current one.
    """
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.StreamHandler(sys.stderr))
    if level is not None:
        root.setLevel(level)
    formatter: logging.Formatter = JsonFormatter() if log_format == "json" else TextFormatter()
    for handler in root.handlers:
        handler.setFormatter(formatter)
        if not any(isinstance(f, ContextFilter) for f in handler.filters):
            handler.addFilter(ContextFilter())
    if log_format == "json":
        activity.logger.activity_info_on_message = False
        workflow.logger.workflow_info_on_message = False


def metrics_runtime(port: int) -> Runtime:
    """A temporalio runtime serving Prometheus metrics on ``0.0.0.0:<port>/metrics``.

    Raises:
        ConfigError: the port cannot be listened on.
    """
    try:
        return Runtime(
            telemetry=TelemetryConfig(
                metrics=PrometheusConfig(bind_address=f"0.0.0.0:{port}"),
                global_tags={"service": "keel"},
            )
        )
    except Exception as err:  # noqa: BLE001 - the Rust core reports bind errors as plain ones
        raise ConfigError(f"cannot serve metrics on port {port}: {err}") from err
