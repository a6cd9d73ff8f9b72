"""Bad input in files, prompts and arguments is exit 2 in one line, and starts nothing.

Each case runs ``keel`` as a user would, against a real Temporal, and then asks Temporal
whether a workflow with the session's id exists: none may.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from tests.helpers.cli import keel

# Bytes that are no text: a PNG header, then bytes no UTF-8 has.
BINARY = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe\xc0\xc1" * 64
# An argument of bytes that are not UTF-8 (as ``keel run $'\xff'`` passes it).
NOT_UTF8 = os.fsdecode(b"caf\xe9 \xff")


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


async def nothing_started(env: WorkflowEnvironment, session: str) -> None:
    with pytest.raises(RPCError) as missing:
        await env.client.get_workflow_handle(session).describe()
    assert missing.value.status == RPCStatusCode.NOT_FOUND, session


def message(role: str, text: str) -> dict[str, object]:
    return {"role": role, "content": [{"text": text}]}


async def test_bad_input_exits_2_naming_it_and_starts_no_session(
    server_env: dict[str, str], temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    files = {
        "binary.json": BINARY,
        "latin1.json": json.dumps([message("user", "café")], ensure_ascii=False).encode("latin-1"),
        "surrogate.json": b'[{"role": "user", "content": [{"text": "\\ud800"}]}]',
        "huge.json": b"[" + b" " * (10 * 1024 * 1024) + b"]",
        "deep.json": b"[" * 100_000 + b"]" * 100_000,
        "big-history.json": json.dumps(
            [message("user", "a" * 700_000), message("assistant", "b" * 700_000)]
        ).encode(),
        "schema-binary.json": BINARY,
        "agent.toml": b'model = "scripted:x.json"\nsystem = "caf\xe9"\n',
    }
    (tmp_path / "x.json").write_text(json.dumps({"responses": []}))
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    big_prompt = ["p" * 100_000] * 12  # 1.2 MB over 12 arguments (each under 128 KB)
    half_prompt = ["p" * 100_000] * 2  # under the prompt's own limit (256,000 bytes)
    model = ["--model", "scripted:x.json"]
    cases: list[tuple[list[str], str]] = [
        ([NOT_UTF8], "the prompt argument is not valid UTF-8 text (byte b'\\xe9' at character 3)"),
        (["--system", NOT_UTF8, "hi"], "--system is not valid UTF-8 text"),
        (["--messages", "binary.json", "hi"], "--messages binary.json: not UTF-8 text (byte"),
        (["--messages", "latin1.json", "hi"], "--messages latin1.json: not UTF-8 text (byte"),
        (
            ["--messages", "surrogate.json", "hi"],
            "--messages surrogate.json: holds text that is not valid Unicode ('\\ud800')",
        ),
        (
            ["--messages", "huge.json", "hi"],
            "--messages huge.json: the file is over the limit of 1,500,000 bytes",
        ),
        (["--messages", "deep.json", "hi"], "--messages deep.json: nested too deeply to read"),
        (
            ["--messages", "big-history.json", *half_prompt],
            "the settings, the prompt, --messages big-history.json come to 1,6",
        ),
        (big_prompt, "the prompt: prompt is 1,200,0"),
        (["--output-schema", "schema-binary.json", "hi"], "--output-schema schema-binary.json"),
        (["--agent", "agent.toml", "hi"], "agent.toml: not UTF-8 text (byte b'\\xe9' at offset"),
        (["--heartbeat-timeout", "0.1", "hi"], "--heartbeat-timeout"),
    ]
    sessions = [f"bad-{uuid.uuid4().hex[:8]}" for _ in cases]

    def run(i: int) -> subprocess.CompletedProcess[str]:
        args, _ = cases[i]
        return keel("run", "--session", sessions[i], *model, *args, env=server_env, cwd=tmp_path)

    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(run, range(len(cases))))
    for (args, expected), session, done in zip(cases, sessions, results, strict=True):
        shown = [a[:40] for a in args]
        assert done.returncode == 2, (shown, done.stderr)
        line = one_line(done)
        assert line.startswith("keel: ") and expected in line, (shown, line)
        assert "unexpected error" not in line and "RESOURCE_EXHAUSTED" not in line
        await nothing_started(temporal_env, session)


def test_an_argument_of_a_session_command_that_is_not_text_is_refused(
    server_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "zeros.key").write_bytes(b"\0" * (1024 * 1024))
    for args, expected in (
        (["steer", "s1", NOT_UTF8], "the text argument is not valid UTF-8 text"),
        (["respond", "s1", "i1", NOT_UTF8], "the value argument is not valid UTF-8 text"),
        (["deny", "s1", "i1", "--reason", NOT_UTF8], "--reason is not valid UTF-8 text"),
        (["approve", "s1", "i1", "--key", "zeros.key"], "zeros.key is not a PEM private key"),
    ):
        done = keel(*args, env=server_env, cwd=tmp_path)
        assert done.returncode == 2, (args, done.stderr)
        assert expected in one_line(done), args
