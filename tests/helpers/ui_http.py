"""HTTP calls to the approvals page from async tests, and what its answers carry."""

from __future__ import annotations

import asyncio
import http.client
import json
import re
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    cookies: list[str]
    body: str

    def json(self) -> dict[str, object]:
        return json.loads(self.body)  # type: ignore[no-any-return]


async def call(
    url: str,
    path: str,
    *,
    method: str = "GET",
    form: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
) -> Answer:
    parts = urlsplit(url)

    def run() -> Answer:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        body = urlencode(form) if form is not None else None
        sent = dict(headers or {})
        if body is not None:
            sent["Content-Type"] = "application/x-www-form-urlencoded"
        conn.request(method, path, body=body, headers=sent)
        response = conn.getresponse()
        answer = Answer(
            status=response.status,
            headers={k.lower(): v for k, v in response.getheaders()},
            cookies=response.headers.get_all("set-cookie") or [],
            body=response.read().decode(),
        )
        conn.close()
        return answer

    return await asyncio.to_thread(run)


def cookie_of(answer: Answer) -> str:
    [cookie] = answer.cookies
    return cookie.split(";")[0]


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page
    return found.group(1)
