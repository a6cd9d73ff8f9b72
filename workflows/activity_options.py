"""How the workflow calls its activities: names, timeouts and retry policies, named once.

Pure module: imported by workflow code.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

MODEL_ACTIVITY = "keel.model.converse"
TOOL_ACTIVITY = "keel.tool.run"
NOTIFY_ACTIVITY = "keel.notify.post"

# Error types an activity raises (as ApplicationError.type) that retrying cannot fix.
MODEL_ERROR_NON_RETRYABLE = "KeelModelError"
TOOL_REGISTRY_ERROR = "KeelToolRegistryError"
STORE_ERROR = "KeelStoreError"
NOTIFY_REFUSED = "KeelNotifyRefused"

MODEL_START_TO_CLOSE = timedelta(minutes=10)
# The activity heartbeats about once a second while the provider works (model_call.py), so
# a dead worker's model call is noticed and retried after 10 s.
MODEL_HEARTBEAT = timedelta(seconds=10)
MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=8,
    non_retryable_error_types=[MODEL_ERROR_NON_RETRYABLE, STORE_ERROR],
)

# Tool exceptions and tool timeouts are turned into error toolResults inside the activity;
# Temporal retries only when the activity itself is lost (worker crash, heartbeat timeout).
TOOL_HEARTBEAT = timedelta(seconds=10)
TOOL_TIMEOUT_MARGIN = timedelta(seconds=30)
TOOL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=3,
)


# A notification POST: one attempt may take NOTIFY_START_TO_CLOSE (the activity's own HTTP
# timeout is shorter); Temporal retries with backoff (1, 2, 4, 8 s ...) for at most
# NOTIFY_SCHEDULE_TO_CLOSE in all. A receiver that answers 4xx (but 408 and 429) refused it
# for good (NOTIFY_REFUSED). The session never waits for these, except when it ends.
NOTIFY_HTTP_TIMEOUT_S = 10.0
NOTIFY_START_TO_CLOSE = timedelta(seconds=15)
NOTIFY_SCHEDULE_TO_CLOSE = timedelta(minutes=2)
NOTIFY_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=30),
    maximum_attempts=6,
    non_retryable_error_types=[NOTIFY_REFUSED],
)


def tool_start_to_close(timeout_s: float) -> timedelta:
    """Temporal's backstop for a tool run: the tool's own timeout plus a margin.

    Args:
        timeout_s: the tool's declared timeout, enforced inside the activity.
    """
    return timedelta(seconds=timeout_s) + TOOL_TIMEOUT_MARGIN
