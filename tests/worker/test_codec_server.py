"""``keel codec-server`` attacked by a caller holding the token: every bad body is a short
400 (never a traceback), and a body over 4 MB is refused (413) without being read whole."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payload, Payloads

from keel.worker.encryption import ENCODING, KEY_ID
from tests.helpers.cli import ROOT, keel_env
from tests.helpers.encryption import keyring_of, new_key
from tests.helpers.temporal import free_port

TOKEN = "codec-test-token"
KEY = new_key()
KEYRING = keyring_of(KEY)
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def codec_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """``keel codec-server`` in its own process, as a person runs it."""
    port = free_port()
    tmp = tmp_path_factory.mktemp("codec")
    env = keel_env(
        KEEL_ENCRYPTION_KEY=KEY,
        KEEL_CODEC_TOKEN=TOKEN,
        KEEL_HOME=str(tmp / "home"),
        XDG_STATE_HOME=str(tmp / "state"),  # where its endpoint's secret is kept
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "keel.worker.cli", "codec-server", "--port", str(port)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, "no codec server"
            time.sleep(0.1)
    try:
        yield port
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
        assert "Traceback" not in err, err  # nothing it was sent broke it


def post(port: int, path: str, body: bytes, headers: dict[str, str] = AUTH) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", path, body=body, headers=headers)
    answer = conn.getresponse()
    status, text = answer.status, answer.read().decode("utf-8", "replace")
    conn.close()
    return status, text


def payloads_json(*payloads: Payload) -> bytes:
    return json_format.MessageToJson(Payloads(payloads=list(payloads))).encode()


def encrypted(data: bytes, kid: str | None = None) -> Payload:
    kid = kid or KEYRING.encrypt_id or ""
    return Payload(metadata={"encoding": ENCODING, KEY_ID: kid.encode()}, data=data)


def sealed(plain: bytes, keyring: object = KEYRING) -> Payload:
    kid, data = keyring.seal(plain)  # type: ignore[attr-defined]
    return encrypted(data, kid)


def plain_payload(value: object) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(value).encode())


BAD_BODIES = {
    "ciphertext-shorter-than-the-nonce": (payloads_json(encrypted(b"\x01\x02\x03")), "too short"),
    "empty-ciphertext": (payloads_json(encrypted(b"")), "too short"),
    "nonce-and-no-tag": (payloads_json(encrypted(b"n" * 20)), "too short"),
    "garbage-ciphertext": (payloads_json(encrypted(bytes(range(64)))), "fails authentication"),
    "altered-ciphertext": (
        payloads_json(encrypted(sealed(b"hello").data[:-1] + b"!")),
        "fails authentication",
    ),
    "another-key": (payloads_json(sealed(b"x", keyring_of(new_key()))), "does not have"),
    "opens-to-no-payload": (payloads_json(sealed(b"\x0a\xff")), "does not hold a payload"),
    "bad-base64": (
        b'{"payloads": [{"metadata": {"encoding": "%s"}, "data": "!!not base64!!"}]}'
        % base64.b64encode(ENCODING),
        "not a Payloads JSON",
    ),
    "not-json": (b"\x89PNG\r\n\x1a\n\x00\x00garbage", "not a Payloads JSON"),
    "not-utf8": (b'{"payloads": "\xff\xfe"}', "not a Payloads JSON"),
    "a-list": (b"[1, 2, 3]", "not a Payloads JSON"),
    "wrong-type": (b'{"payloads": 5}', "not a Payloads JSON"),
    "nested-too-deeply": (b'{"payloads": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "Payloads"),
}


@pytest.mark.parametrize("case", sorted(BAD_BODIES))
def test_a_bad_body_is_a_short_400(codec_port: int, case: str) -> None:
    body, reason = BAD_BODIES[case]
    status, text = post(codec_port, "/decode", body)
    assert status == 400, (status, text[:500])
    message = json.loads(text)["message"]
    assert reason in message, message
    assert "Traceback" not in text and len(text) < 600, text


def test_the_codec_still_round_trips(codec_port: int) -> None:
    status, text = post(codec_port, "/encode", payloads_json(plain_payload({"canary": 1})))
    assert status == 200, text
    assert "canary" not in base64.b64decode(json.loads(text)["payloads"][0]["data"]).decode(
        "latin-1"
    )
    status, text = post(codec_port, "/decode", text.encode())
    assert status == 200, text
    [back] = json_format.Parse(text, Payloads()).payloads
    assert json.loads(back.data) == {"canary": 1}


def raw_answer(port: int, head: bytes, body_chunks: Iterator[bytes]) -> bytes:
    """Send a request's head and as much body as the server takes; what it answered."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(head)
        for chunk in body_chunks:
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
        answer = b""
        try:
            while not _complete(answer):
                data = sock.recv(65536)
                if not data:
                    break
                answer += data
        except ConnectionResetError:
            pass
        return answer


def _complete(answer: bytes) -> bool:
    """Whether an HTTP answer's head and (by its Content-Length) body are all in."""
    head, sep, body = answer.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return True


def head(headers: dict[str, str]) -> bytes:
    lines = ["POST /decode HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_a_declared_length_over_4_mb_is_refused_before_reading(codec_port: int) -> None:
    # 100 MB declared, 1 KB sent: the answer comes without waiting for the rest
    request = head({**AUTH, "Content-Length": str(100 * 1024 * 1024)})
    answer = raw_answer(codec_port, request, iter([b"{" * 1024]))
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert b"over the limit of 4,194,304 bytes" in answer, answer


def test_a_chunked_body_is_cut_off_past_4_mb(codec_port: int) -> None:
    # no Content-Length: chunks until past the limit, and no last chunk; a server that read
    # the whole body would wait for it, and the read below would time out
    request = head({**AUTH, "Transfer-Encoding": "chunked"})
    chunk = b"x" * 65536
    framed = b"%x\r\n%s\r\n" % (len(chunk), chunk)
    answer = raw_answer(codec_port, request, iter([framed] * 72))  # 4.5 MB
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]


def test_without_the_token_nothing_is_read(codec_port: int) -> None:
    request = head({"Content-Length": str(100 * 1024 * 1024)})
    answer = raw_answer(codec_port, request, iter([]))
    assert answer.startswith(b"HTTP/1.1 401 "), answer[:200]
