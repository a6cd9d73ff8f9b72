"""How the workflow calls its activities: names, timeouts and retry policies, named once.

Pure module: imported by workflow code.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

MODEL_ACTIVITY = "keel.model.converse"
TOOL_ACTIVITY = "keel.tool.run"
NOTIFY_ACTIVITY = "keel.notify.post"
CHILD_REPORT_ACTIVITY = "keel.session.child_report"
FORWARD_ACTIVITY = "keel.session.forward"
JUDGE_ACTIVITY = "keel.judge.decide"

# Error types an activity raises (as ApplicationError.type) that retrying cannot fix.
MODEL_ERROR_NON_RETRYABLE = "KeelModelError"
TOOL_REGISTRY_ERROR = "KeelToolRegistryError"
STORE_ERROR = "KeelStoreError"
NOTIFY_REFUSED = "KeelNotifyRefused"
NOT_OUR_CHILD = "KeelNotOurChild"
# An attempt whose worker died, given back by the worker started after it (it retries).
WORKER_LOST = "KeelWorkerLost"

# How long Temporal waits for a heartbeat of a running model call or tool run before it
# deems the attempt lost (its worker died) and retries it on another worker. Sessions may set
# their own (``SessionConfig.heartbeat_timeout_s``); this is the default. The activities
# heartbeat ``HEARTBEATS_PER_TIMEOUT`` times per timeout, at most 10 s apart (model_call.py,
# tool_run.py), so a beat may come late by two thirds of the timeout before the attempt is
# wrongly given up (at 200 sessions on one worker and a 2-core dev server, 1 s lost hundreds
# of attempts to late beats, 2 s none). Each beat is an Action on Temporal Cloud: 14 per 10 s
# call at 2 s, 1 at 30 s. What a long timeout used to cost, and what pays for it now:
# - a dead worker's calls: a worker restarted where it ran, or running beside it, gives them
#   back at once whatever the timeout (``keel.worker.process.inflight``); only a machine that
#   is gone waits for the timeout;
# - a cancel: a call that beats seldom asks Temporal every second whether it was cancelled
#   (``keel.activities.heartbeats``; describe, not an Action);
# - streamed text for readers that cannot reach the worker's stream endpoint: at the beats
#   only (every 10 s; a model call and a tool beat at most 10 s apart).
# So the default is 30 s since issue 45 (2 s before; docs/performance.md, "Recovery against
# heartbeats").
HEARTBEAT_TIMEOUT = timedelta(seconds=30)
HEARTBEATS_PER_TIMEOUT = 3
# Before issue 23, 10 s (kept for the benchmark that compares the two).
LEGACY_HEARTBEAT_TIMEOUT = timedelta(seconds=10)

MODEL_START_TO_CLOSE = timedelta(minutes=10)
# A model call, retries included, is bounded in time rather than in attempts: the model
# activity's schedule-to-close timeout, ``SessionConfig.model_retry_s`` (600 s by default;
# None: no bound). A server that is down for a few minutes (restarting, overloaded) is waited
# for; one that stays down fails the turn, with the last error, after about that long. An
# answer retrying cannot fix (401, 404, an unknown model: MODEL_ERROR_NON_RETRYABLE) fails at
# once.
# The first retry comes 0.25 s after a failure or a lost attempt (part of the recovery time
# after a crash), then 0.5, 1, 2 ... at most 60 s apart: 17 attempts in 10 minutes.
MODEL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=0.25),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
    maximum_attempts=0,  # unlimited: the schedule-to-close timeout bounds the retries
    non_retryable_error_types=[MODEL_ERROR_NON_RETRYABLE, STORE_ERROR],
)

# Tool exceptions and tool timeouts are turned into error toolResults inside the activity;
# Temporal retries only when the activity itself is lost (worker crash, heartbeat timeout).
TOOL_TIMEOUT_MARGIN = timedelta(seconds=30)
# A client-side tool's result, checked by the tool activity against the tool's output type
# (``keel.workflows.client_tools``): a quick check, and the store.
CLIENT_CHECK_TIMEOUT_S = 60.0
TOOL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=0.25),
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


# A parent asking its sub-agent's session (``keel.session.child_report``) or handing it a
# decision (``keel.session.forward``): quick client calls, retried while Temporal is
# unreachable; a session that is not the parent's own child is final.
SESSION_CALL_START_TO_CLOSE = timedelta(seconds=30)
SESSION_CALL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=0.25),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=8,
    non_retryable_error_types=[NOT_OUR_CHILD],
)


# A judge in the gate (keel.judge.decide): one model call or function at most this long, tried
# twice; what fails or times out goes to a person.
JUDGE_START_TO_CLOSE = timedelta(seconds=60)
# How long a function judge may think before the call goes to a person (``KEEL_JUDGE_TIMEOUT_S``
# changes it, up to the most that leaves the activity time to answer).
DEFAULT_JUDGE_TIMEOUT_S = 30.0
MAX_JUDGE_TIMEOUT_S = 55.0
JUDGE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=0.5), maximum_attempts=2)


def tool_start_to_close(timeout_s: float) -> timedelta:
    """Temporal's backstop for a tool run: the tool's own timeout plus a margin.

    Args:
        timeout_s: the tool's declared timeout, enforced inside the activity.
    """
    return timedelta(seconds=timeout_s) + TOOL_TIMEOUT_MARGIN


def model_schedule_to_close(seconds: float | None) -> timedelta | None:
    """The model activity's schedule-to-close timeout: how long a call may take, retries and all.

    Args:
        seconds: the session's ``SessionConfig.model_retry_s``; None: no bound.
    """
    return None if seconds is None else timedelta(seconds=seconds)


def next_retry_delay(policy: RetryPolicy, attempt: int) -> timedelta:
    """How long Temporal waits before the attempt after ``attempt`` (counted from 1)."""
    seconds = policy.initial_interval.total_seconds() * policy.backoff_coefficient ** (attempt - 1)
    if policy.maximum_interval is not None:
        seconds = min(seconds, policy.maximum_interval.total_seconds())
    return timedelta(seconds=seconds)


def heartbeat_timeout(seconds: float | None) -> timedelta:
    """The heartbeat timeout of a session's activities.

    Args:
        seconds: the session's own (``SessionConfig.heartbeat_timeout_s``); None: the
            default, ``HEARTBEAT_TIMEOUT``.
    """
    return HEARTBEAT_TIMEOUT if seconds is None else timedelta(seconds=seconds)


def heartbeat_every_s(timeout: timedelta | None, longest_s: float) -> float:
    """How often an activity with this heartbeat timeout heartbeats.

    Args:
        timeout: the activity's heartbeat timeout (``activity.info().heartbeat_timeout``);
            None when it has none.
        longest_s: the interval when there is no timeout, and the longest one in any case.
    """
    if not timeout:
        return longest_s
    return min(longest_s, max(timeout.total_seconds() / HEARTBEATS_PER_TIMEOUT, 0.05))
