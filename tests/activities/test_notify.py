"""``keel.notify.post`` on its own: what counts as delivered, what is retried, what is refused."""

from __future__ import annotations

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from keel.activities.notify import Notifications, signature
from keel.workflows.activity_contracts import NotifyRequest
from keel.workflows.activity_options import NOTIFY_REFUSED
from tests.helpers.webhooks import receiver

EVENT = {"id": "s/turn/1", "event": "turn_ended", "text": "done"}
post_notification = Notifications().post  # a worker without KEEL_NOTIFY_SECRET


@pytest.mark.parametrize(
    ("status", "retried"), [(404, False), (400, False), (429, True), (408, True), (503, True)]
)
async def test_an_answer_that_is_not_2xx_fails_the_attempt(status: int, retried: bool) -> None:
    with receiver(status=status) as hook:
        with pytest.raises(ApplicationError) as failed:
            await ActivityEnvironment().run(
                post_notification, NotifyRequest(url=hook.url, event=EVENT)
            )
    assert f"HTTP {status}" in str(failed.value)
    assert failed.value.non_retryable is not retried
    assert (failed.value.type == NOTIFY_REFUSED) is not retried


async def test_delivered_on_2xx_with_the_event_as_body() -> None:
    with receiver(status=204) as hook:
        done = await ActivityEnvironment().run(
            post_notification, NotifyRequest(url=hook.url, event=EVENT)
        )
    assert done.status == 204 and done.attempt == 1
    assert hook.received[0].event == EVENT


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://files.example/x", "http://user:pw@internal.example/"]
)
async def test_a_url_that_is_not_http_is_never_opened(url: str) -> None:
    with pytest.raises(ApplicationError) as refused:
        await ActivityEnvironment().run(post_notification, NotifyRequest(url=url, event=EVENT))
    assert refused.value.non_retryable and "not an http(s) URL" in str(refused.value)


async def test_nothing_listening_is_a_retryable_failure() -> None:
    with receiver() as hook:
        url = hook.url
    with pytest.raises(ApplicationError) as failed:
        await ActivityEnvironment().run(post_notification, NotifyRequest(url=url, event=EVENT))
    assert not failed.value.non_retryable and "POST to http://127.0.0.1" in str(failed.value)


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_a_redirect_is_a_failed_attempt_and_is_never_followed(
    status: int, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    signed = Notifications("s3cret").post  # KEEL_NOTIFY_SECRET, as the worker's settings give it
    with receiver() as elsewhere, receiver(status=status, location=elsewhere.url) as hook:
        with pytest.raises(ApplicationError) as failed:
            await ActivityEnvironment().run(signed, NotifyRequest(url=hook.url, event=EVENT))
        assert len(hook.received) == 1  # the POST, signed
        assert hook.received[0].headers["X-Keel-Signature"].startswith("sha256=")
        assert elsewhere.received == []  # neither the event nor its signature went on
    assert f"HTTP {status} redirect" in str(failed.value) and "not followed" in str(failed.value)
    assert not failed.value.non_retryable and failed.value.type != NOTIFY_REFUSED
    assert elsewhere.url in caplog.text  # the log says where it pointed


def test_signature_depends_on_secret_timestamp_and_body() -> None:
    base = signature("k", "100", b"{}")
    assert base.startswith("sha256=") and len(base) == 7 + 64
    assert base != signature("k2", "100", b"{}")
    assert base != signature("k", "101", b"{}")
    assert base != signature("k", "100", b"{ }")
