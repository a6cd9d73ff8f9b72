"""Who ``keel codec-server`` answers: the endpoint URL's secret or the bearer token, from no
browser or the UI's origin, on a loopback ``Host``; everyone else is refused before a byte of
their body is decoded. The Web UI itself, in Chromium: ``tests/worker/test_codec_web_ui.py``.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads

from keel.worker.codec_endpoint import codec_record_path
from tests.helpers.cli import ROOT, keel, keel_env
from tests.helpers.encryption import new_key
from tests.helpers.temporal import free_port

KEY = new_key()
TOKEN = "access-test-token"
UI = "http://127.0.0.1:8233"
JSON = {"Content-Type": "application/json"}


@dataclass
class Codec:
    port: int
    endpoint: str
    printed: str

    @property
    def secret(self) -> str:
        return self.endpoint.rsplit("/", 1)[1]


def env_for(tmp: Path, **extra: str) -> dict[str, str]:
    return keel_env(
        KEEL_ENCRYPTION_KEY=KEY,
        KEEL_HOME=str(tmp / "home"),
        XDG_STATE_HOME=str(tmp / "state"),
        **extra,
    )


@contextmanager
def codec_server(env: dict[str, str], *flags: str) -> Iterator[Codec]:
    """``keel codec-server --port P FLAGS`` in its own process, until it prints its endpoint."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "keel.worker.cli", "codec-server", "--port", str(port), *flags],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    endpoint = ""
    try:
        assert proc.stdout is not None
        printed = ""
        for line in proc.stdout:
            printed += line
            found = re.fullmatch(rf"\s+(http://127\.0\.0\.1:{port}/[A-Za-z0-9_-]{{43}})\s*", line)
            if found:
                endpoint = found.group(1)
                break
        assert endpoint, printed
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "no codec server"
                time.sleep(0.1)
        yield Codec(port, endpoint, printed)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
        assert "Traceback" not in err, err
        if endpoint:  # nothing it logs gives the secret away
            assert endpoint.rsplit("/", 1)[1] not in err, err


def request(
    port: int, path: str, headers: dict[str, str], method: str = "POST", body: bytes | None = None
) -> tuple[int, dict[str, str], str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    payloads = json_format.MessageToJson(
        Payloads(payloads=[Payload(metadata={"encoding": b"json/plain"}, data=b'"x"')])
    ).encode()
    conn.request(method, path, body=payloads if body is None else body, headers=headers)
    answer = conn.getresponse()
    result = (
        answer.status,
        {k.lower(): v for k, v in answer.getheaders()},
        answer.read().decode("utf-8", "replace"),
    )
    conn.close()
    return result


@pytest.fixture(scope="module")
def codec(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Codec]:
    tmp = tmp_path_factory.mktemp("access")
    with codec_server(env_for(tmp, KEEL_CODEC_TOKEN=TOKEN), "--ui", UI) as running:
        yield running


def test_the_endpoint_url_needs_no_header(codec: Codec) -> None:
    # what the Web UI does: <endpoint>/decode, no Authorization, its Origin
    status, headers, body = request(codec.port, f"/{codec.secret}/encode", {**JSON, "Origin": UI})
    assert status == 200, body
    assert headers["access-control-allow-origin"] == UI
    status, _, body = request(codec.port, f"/{codec.secret}/decode", JSON, body=body.encode())
    assert status == 200, body
    [back] = json_format.Parse(body, Payloads()).payloads
    assert back.data == b'"x"'


def test_the_bearer_token_still_works(codec: Codec) -> None:
    auth = {**JSON, "Authorization": f"Bearer {TOKEN}"}
    assert request(codec.port, "/decode", auth)[0] == 200
    assert request(codec.port, "/encode", auth)[0] == 200


@pytest.mark.parametrize(
    ("case", "status"),
    [
        ("no-header", 401),
        ("wrong-token", 401),
        ("token-as-path", 404),
        ("wrong-secret", 404),
        ("secret-cut-short", 404),
        ("secret-and-more", 404),
        ("secret-other-case", 404),
        ("secret-unknown-operation", 404),
        ("secret-as-header", 401),
    ],
)
def test_without_the_secret_or_the_token_nothing_decodes(
    codec: Codec, case: str, status: int
) -> None:
    s = codec.secret
    path, headers = {
        "no-header": ("/decode", JSON),
        "wrong-token": ("/decode", {**JSON, "Authorization": f"Bearer {TOKEN}x"}),
        "token-as-path": (f"/{TOKEN}/decode", JSON),
        "wrong-secret": (f"/{'A' * 43}/decode", JSON),
        "secret-cut-short": (f"/{s[:-1]}/decode", JSON),
        "secret-and-more": (f"/{s}x/decode", JSON),
        "secret-other-case": (f"/{s.swapcase()}/decode", JSON),
        "secret-unknown-operation": (f"/{s}/keys", JSON),
        "secret-as-header": ("/decode", {**JSON, "Authorization": f"Bearer {s}"}),
    }[case]
    got, _, body = request(codec.port, path, headers)
    assert got == status, (got, body)
    assert '"payloads"' not in body


@pytest.mark.parametrize(
    "origin", ["http://evil.example", "http://localhost:8233", "null", "http://127.0.0.1:8234"]
)
def test_another_origin_is_refused_even_with_the_secret(codec: Codec, origin: str) -> None:
    # a page elsewhere that learned the URL cannot use the operator's browser to decode:
    # not by a simple request (403 before the body is read) ...
    for path, extra in ((f"/{codec.secret}/decode", {}), ("/decode", {"Authorization": TOKEN})):
        status, headers, body = request(codec.port, path, {**JSON, **extra, "Origin": origin})
        assert status == 403, body
        assert "may not call" in body
        assert "access-control-allow-origin" not in headers
    # ... nor by a preflighted one
    preflight = {
        "Origin": origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,x-namespace",
    }
    status, headers, _ = request(codec.port, f"/{codec.secret}/decode", preflight, "OPTIONS", b"")
    assert status >= 400 and "access-control-allow-origin" not in headers


def test_the_uis_preflight_is_answered(codec: Codec) -> None:
    preflight = {
        "Origin": UI,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,x-namespace",
    }
    status, headers, _ = request(codec.port, f"/{codec.secret}/decode", preflight, "OPTIONS", b"")
    assert status == 200
    assert headers["access-control-allow-origin"] == UI


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:8888",
        "127.evil.example:8888",
        "localhost.evil",
        "10.0.0.1",
        "",
    ],
)
def test_a_rebound_host_is_refused(codec: Codec, host: str) -> None:
    # DNS rebinding: a page of evil.example, now resolving to 127.0.0.1, is same-origin
    # with the server: the Host it sends still names it
    status, _, body = request(codec.port, f"/{codec.secret}/decode", {**JSON, "Host": host})
    assert status == 403, body
    assert "loopback" in body


def test_the_secret_is_kept_private_and_renewed_on_demand(tmp_path: Path) -> None:
    env = env_for(tmp_path)  # no KEEL_CODEC_TOKEN: the endpoint URL only
    with codec_server(env) as first:
        assert request(first.port, "/decode", {**JSON, "Authorization": "Bearer "})[0] == 401
        assert request(first.port, f"/{first.secret}/decode", JSON)[0] == 200
        assert "whoever has it can decrypt" in first.printed
    record = codec_record_path(tmp_path / "home", tmp_path / "state")
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    assert stat.S_IMODE(record.parent.stat().st_mode) == 0o700
    assert json.loads(record.read_text())["secret"] == first.secret
    with codec_server(env) as again:  # the URL pasted into the UI still works
        assert again.secret == first.secret
    with codec_server(env, "--new-secret") as renewed:
        assert renewed.secret != first.secret
        assert request(renewed.port, f"/{first.secret}/decode", JSON)[0] == 404
        assert request(renewed.port, f"/{renewed.secret}/decode", JSON)[0] == 200
    # a record someone else could write is not trusted: a new secret, not theirs
    record.write_text(json.dumps({"secret": "B" * 43, "home": str(tmp_path / "home")}))
    record.chmod(0o666)
    with codec_server(env) as distrusted:
        assert distrusted.secret != "B" * 43


@pytest.mark.parametrize(
    "ui",
    ["localhost:8233", "ftp://localhost", "http://localhost:8233/namespaces", "http://:80", "x"],
)
def test_a_ui_that_is_not_an_origin_exits_2(tmp_path: Path, ui: str) -> None:
    done = keel("codec-server", "--port", str(free_port()), "--ui", ui, env=env_for(tmp_path))
    assert done.returncode == 2, done
    assert "--ui" in done.stderr and "Traceback" not in done.stderr
