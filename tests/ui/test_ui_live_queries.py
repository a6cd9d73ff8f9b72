"""The live page renders each change from the state it just read, and asks for effects only
after events that can change them: Temporal Cloud bills each query.

Before, every change cost three queries: the follower's ``state``, then ``state`` again with
the messages and ``effects`` to render the page. Queries are counted by a worker interceptor.
"""

from __future__ import annotations

import asyncio
import http.client
import uuid
from urllib.parse import urlsplit

from keel import KeelClient
from keel.worker.ui.app import create_app
from keel.worker.ui.serving import ui_running
from keel.worker.ui.source import KeelSource
from tests.helpers.counting import CountAsked, asked
from tests.helpers.fixture_types import RunWorker, Script
from tests.helpers.scripts import respond, text


def _stream(url: str, path: str) -> str:
    """A server-sent stream read until its ``end`` event."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    conn.request("GET", path)
    response = conn.getresponse()
    assert response.status == 200
    seen = ""
    while "event: end" not in seen:
        line = response.readline().decode()
        assert line, seen
        seen += line
    conn.close()
    return seen


async def test_the_live_page_renders_changes_from_the_followed_state(
    keel: KeelClient, run_worker: RunWorker, script: Script
) -> None:
    """Two more turns of 1 s model calls while the page follows, then the session closes: the
    conversation reaches the page (rendered from the followed state, messages and all), and
    the effects table is read only at the first render, each turn's end and the last render;
    no second ``state`` query per change."""
    config = script(
        [
            respond(text("ready")),
            respond(text("first answer"), delay_s=1.0),
            respond(text("second answer"), delay_s=1.0),
        ]
    )
    session = f"ui-live-{uuid.uuid4().hex[:8]}"
    async with (
        run_worker(interceptors=[CountAsked()], max_cached_workflows=10),
        ui_running(create_app(KeelSource(keel)), "127.0.0.1", 0) as url,
    ):
        assert (await keel.run(session, "hi", config=config, timeout_s=30)).status == "completed"
        before = asked(session)
        reading = asyncio.create_task(asyncio.to_thread(_stream, url, f"/live/sessions/{session}"))
        await asyncio.sleep(1.0)  # the page has rendered once and follows
        await keel.prompt(session, "one")
        await keel.prompt(session, "two")
        await keel.close(session)
        seen = await asyncio.wait_for(reading, 60)
    answered = asked(session) - before
    assert "first answer" in seen and "second answer" in seen, seen
    effects, states = answered["query effects"], answered["query state"]
    # the first render, two turns' ends, the last render (and one for the closing, at most)
    assert 2 <= effects <= 5, answered
    # per change one state query with the messages; before, two and an effects query
    changes = seen.count("event: parts")
    assert states <= changes + 3, (answered, changes)
