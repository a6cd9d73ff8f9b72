"""``keel worker`` as a deployed service: settings checked at start, health, metrics, traces
exported by OTLP, JSON logs, and a graceful shutdown on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.service import TLSConfig
from temporalio.testing import WorkflowEnvironment

from keel import KeelClient, SessionConfig, Settings, open_store
from keel.worker.settings import ConfigError, WorkerSettings
from tests.helpers.cli import ROOT, keel, keel_env
from tests.helpers.scripts import SAMPLE_TOOLS, respond, text, tool_use, write_script
from tests.helpers.temporal import free_port

PEM_CERT = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
PEM_KEY = "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n"


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


# ----------------------------------------------------------------------------- settings


def test_worker_settings_from_env_and_flags() -> None:
    env = {
        "KEEL_MAX_CONCURRENT_ACTIVITIES": "8",
        "KEEL_MAX_CONCURRENT_WORKFLOW_TASKS": "4",
        "KEEL_SHUTDOWN_GRACE_S": "45",
        "KEEL_STICKY_TIMEOUT_S": "2.5",
        "KEEL_HEALTH_PORT": "8081",
        "KEEL_METRICS_PORT": "9464",
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
        "OTEL_SERVICE_NAME": "agents",
        "KEEL_LOG_FORMAT": "JSON",
        "KEEL_LOG_LEVEL": "info",
    }
    config = WorkerSettings.load(env)
    assert config == WorkerSettings(
        max_concurrent_activities=8,
        max_concurrent_workflow_tasks=4,
        shutdown_grace_s=45.0,
        sticky_timeout_s=2.5,
        health_port=8081,
        metrics_port=9464,
        otlp_endpoint="http://collector:4318",
        otlp_traces_url="http://collector:4318/v1/traces",
        service_name="agents",
        log_format="json",
        log_level="INFO",
    )
    flags = {"KEEL_MAX_CONCURRENT_ACTIVITIES": "2", "KEEL_OTLP_ENDPOINT": "https://otel:4318/"}
    config = WorkerSettings.load(env, flags)
    assert config.max_concurrent_activities == 2  # a flag wins over its variable
    assert config.otlp_traces_url == "https://otel:4318/v1/traces"  # Keel's own wins over OTEL_
    assert WorkerSettings.load({}) == WorkerSettings()  # nothing set: Temporal's defaults
    traces = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/custom/traces"}
    assert WorkerSettings.load(traces).otlp_traces_url == "http://c:4318/custom/traces"


@pytest.mark.parametrize(
    ("env", "flags", "reason"),
    [
        ({"KEEL_MAX_CONCURRENT_ACTIVITIES": "lots"}, {}, "KEEL_MAX_CONCURRENT_ACTIVITIES='lots'"),
        ({"KEEL_MAX_CONCURRENT_ACTIVITIES": "0"}, {}, "must be at least 1"),
        ({"KEEL_MAX_CONCURRENT_WORKFLOW_TASKS": "1"}, {}, "must be at least 2"),
        ({}, {"KEEL_SHUTDOWN_GRACE_S": "-1"}, "--shutdown-grace='-1' must be 0 or more"),
        ({"KEEL_SHUTDOWN_GRACE_S": "soon"}, {}, "is not a number of seconds"),
        ({"KEEL_STICKY_TIMEOUT_S": "0.01"}, {}, "KEEL_STICKY_TIMEOUT_S=0.01 must be 0.1 s or more"),
        ({"KEEL_STICKY_TIMEOUT_S": "-1"}, {}, "KEEL_STICKY_TIMEOUT_S='-1' must be 0 or more"),
        ({"KEEL_METRICS_PORT": "99999"}, {}, "not a port number"),
        ({"KEEL_HEALTH_PORT": "9000", "KEEL_METRICS_PORT": "9000"}, {}, "use two ports"),
        ({"KEEL_OTLP_ENDPOINT": "collector:4318"}, {}, "not an http(s) URL"),
        ({"KEEL_LOG_FORMAT": "xml"}, {}, "use one of text, json"),
        ({}, {"KEEL_LOG_LEVEL": "loud"}, "--log-level='loud'"),
    ],
)
def test_invalid_worker_settings_name_the_problem(
    env: dict[str, str], flags: dict[str, str], reason: str
) -> None:
    with pytest.raises(ConfigError) as err:
        WorkerSettings.load(env, flags)
    assert reason in str(err.value)


def test_client_options_tls_and_api_key(tmp_path: Path) -> None:
    cert, key, ca = tmp_path / "c.pem", tmp_path / "k.pem", tmp_path / "ca.pem"
    cert.write_text(PEM_CERT)
    key.write_text(PEM_KEY)
    ca.write_text(PEM_CERT)
    assert Settings.from_env({}).client_options().tls is False
    mtls = Settings.from_env(
        {
            "TEMPORAL_ADDRESS": "ns.acct.tmprl.cloud:7233",
            "TEMPORAL_TLS_CLIENT_CERT_PATH": str(cert),
            "TEMPORAL_TLS_CLIENT_KEY_PATH": str(key),
            "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(ca),
            "TEMPORAL_TLS_SERVER_NAME": "temporal.internal",
            "TEMPORAL_GRPC_META_X_TENANT": "blue",
        }
    ).client_options()
    assert mtls.tls == TLSConfig(
        server_root_ca_cert=PEM_CERT.encode(),
        domain="temporal.internal",
        client_cert=PEM_CERT.encode(),
        client_private_key=PEM_KEY.encode(),
    )
    assert mtls.rpc_metadata == {"x-tenant": "blue"}
    # an API key alone means Temporal Cloud: TLS with the system roots
    cloud = Settings.from_env({"TEMPORAL_API_KEY": "secret"}).client_options()
    assert cloud.api_key == "secret" and cloud.tls == TLSConfig()
    plain = Settings.from_env({"TEMPORAL_API_KEY": "k", "TEMPORAL_TLS": "false"}).client_options()
    assert plain.tls is False and plain.api_key == "k"
    inline = Settings.from_env(
        {"TEMPORAL_TLS_CLIENT_CERT_DATA": PEM_CERT, "TEMPORAL_TLS_CLIENT_KEY_DATA": PEM_KEY}
    ).client_options()
    assert isinstance(inline.tls, TLSConfig) and inline.tls.client_cert == PEM_CERT.encode()


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({"TEMPORAL_TLS_CLIENT_KEY_PATH": "{key}"}, "TEMPORAL_TLS_CLIENT_CERT_PATH is not"),
        ({"TEMPORAL_TLS_CLIENT_CERT_PATH": "{cert}"}, "TEMPORAL_TLS_CLIENT_KEY_PATH is not"),
        (
            {"TEMPORAL_TLS_CLIENT_CERT_PATH": "{missing}", "TEMPORAL_TLS_CLIENT_KEY_PATH": "{key}"},
            "no such file",
        ),
        ({"TEMPORAL_TLS_SERVER_CA_CERT_PATH": "{garbage}"}, "not a PEM file"),
        (
            {"TEMPORAL_TLS_SERVER_CA_CERT_PATH": "{cert}", "TEMPORAL_TLS_SERVER_CA_CERT_DATA": "x"},
            "choose one",
        ),
        ({"TEMPORAL_TLS": "maybe"}, "not a boolean"),
        ({"TEMPORAL_TLS": "false", "TEMPORAL_TLS_SERVER_NAME": "x"}, "TEMPORAL_TLS=false"),
        ({"TEMPORAL_ADDRESS": "temporal.example"}, "is not host:port"),
    ],
)
def test_invalid_connection_settings_name_the_problem(
    tmp_path: Path, env: dict[str, str], reason: str
) -> None:
    files = {
        "cert": tmp_path / "c.pem",
        "key": tmp_path / "k.pem",
        "garbage": tmp_path / "g.pem",
        "missing": tmp_path / "nope.pem",
    }
    files["cert"].write_text(PEM_CERT)
    files["key"].write_text(PEM_KEY)
    files["garbage"].write_text("not a certificate")
    env = {k: v.format(**{n: str(p) for n, p in files.items()}) for k, v in env.items()}
    with pytest.raises(ConfigError) as err:
        Settings.from_env(env).client_options()
    assert reason in str(err.value)


def test_keel_worker_exits_2_with_the_reason(tmp_path: Path) -> None:
    key = tmp_path / "k.pem"
    key.write_text(PEM_KEY)
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", port))
        taken.listen()
        cases = [
            (
                {"TEMPORAL_TLS_CLIENT_KEY_PATH": str(key)},
                [],
                "TEMPORAL_TLS_CLIENT_CERT_PATH is not",
            ),
            ({}, ["--tls-cert", str(tmp_path / "none.pem"), "--tls-key", str(key)], "no such file"),
            ({"KEEL_MAX_CONCURRENT_ACTIVITIES": "many"}, [], "is not a whole number"),
            ({}, ["--metrics-port", "0"], "--metrics-port='0' is not a port number"),
            ({"KEEL_HEALTH_PORT": str(port)}, [], f"cannot serve health checks on port {port}"),
            ({"KEEL_METRICS_PORT": str(port)}, [], f"cannot serve metrics on port {port}"),
        ]
        for env, flags, reason in cases:
            # nothing listens at that address: settings are checked before connecting
            result = keel(
                "worker",
                *flags,
                env=keel_env(TEMPORAL_ADDRESS="127.0.0.1:1", **env),
                timeout=60,
            )
            assert result.returncode == 2, (env, flags, result.stderr)
            assert reason in result.stderr, result.stderr
            assert "Traceback" not in result.stderr


# ----------------------------------------------------------------------------- the service


class Collector:
    """An OTLP/HTTP receiver: keeps the spans posted to /v1/traces."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, dict[str, object]]] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        for span in scope.spans:
                            attrs = {
                                a.key: a.value.string_value or a.value.int_value
                                for a in span.attributes
                            }
                            collector.spans.append((span.name, attrs))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def names(self) -> set[str]:
        return {name for name, _ in self.spans}


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    yield c
    c.server.shutdown()
    c.server.server_close()


async def test_worker_service_health_metrics_traces_logs_and_graceful_stop(
    temporal_env: WorkflowEnvironment, tmp_path: Path, collector: Collector
) -> None:
    client: Client = temporal_env.client
    health, metrics = free_port(), free_port()
    queue = f"svc-{uuid.uuid4().hex[:8]}"
    store = tmp_path / "store"
    log = tmp_path / "worker.log"
    env = keel_env(
        TEMPORAL_ADDRESS=client.service_client.config.target_host,
        KEEL_TASK_QUEUE=queue,
        KEEL_STORE=str(store),
        KEEL_HEALTH_PORT=str(health),
        KEEL_OTLP_ENDPOINT=collector.url,
        KEEL_LOG_FORMAT="json",
        KEEL_LOG_LEVEL="INFO",
        KEEL_SHUTDOWN_GRACE_S="20",
        OTEL_BSP_SCHEDULE_DELAY="100",
    )
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "keel.worker.cli", "worker", "--tools", SAMPLE_TOOLS]
            + ["--metrics-port", str(metrics)],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + 30
        while http_get_quiet(f"http://127.0.0.1:{health}/readyz") != 200:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the worker never became ready"
            time.sleep(0.2)
        assert http_get(f"http://127.0.0.1:{health}/healthz") == (200, '{"status": "ok"}')
        assert http_get(f"http://127.0.0.1:{health}/other")[0] == 404

        keel_client = KeelClient(client, queue, open_store(str(store)))
        marker = tmp_path / "slow-started"
        model = write_script(
            tmp_path / "s.json",
            [
                respond(tool_use("e", "echo", text="hello"), stop="tool_use", tokens=3),
                respond(text("first turn done"), tokens=4),
                respond(
                    tool_use("r", "record", path=str(marker), value="x"),
                    tool_use("s", "slow", seconds=3.0, label="finished while draining"),
                    stop="tool_use",
                ),
            ],
        )
        session = f"svc-{uuid.uuid4().hex[:8]}"
        config = SessionConfig(model=model, tool_modules=[SAMPLE_TOOLS])
        record = await keel_client.run(session, "hello", config=config, timeout_s=60)
        assert record.status == "completed", record.error

        status, body = http_get(f"http://127.0.0.1:{metrics}/metrics")
        assert status == 200
        assert "temporal_worker_task_slots_available" in body
        assert "temporal_activity_execution_latency" in body
        assert "keel_model_calls" in body and "keel_tool_runs" in body

        deadline = time.monotonic() + 15
        while not {"keel.turn", "keel.model_call", "keel.tool_run"} <= collector.names():
            assert time.monotonic() < deadline, collector.names()
            time.sleep(0.2)
        tool_span = next(a for n, a in collector.spans if n == "keel.tool_run")
        assert tool_span["keel.tool.name"] == "echo"
        assert tool_span["keel.tool.status"] == "success"
        assert tool_span["keel.session_id"] == session

        # SIGTERM while a tool runs: no longer ready, still alive, and the tool finishes
        await keel_client.prompt(session, "slow one")
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert time.monotonic() < deadline, "the record tool never ran"
            time.sleep(0.05)
        # the slow tool's attempt started on this worker (the marker only says that the
        # record tool ran; under load the slow one can still wait for a poll, which a
        # draining worker no longer makes)
        while await attempts_started(client, session) < 6:
            assert time.monotonic() < deadline, "the slow tool never started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert http_get(f"http://127.0.0.1:{health}/readyz")[0] == 503
        assert http_get(f"http://127.0.0.1:{health}/healthz")[0] == 200
        assert proc.wait(timeout=30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert http_get_quiet(f"http://127.0.0.1:{health}/healthz") is None  # closed

    # the slow tool completed on this worker, during the drain, at its first attempt. Its
    # events can wait behind a workflow task that the stopping worker was handed as it
    # stopped and never ran: Temporal buffers them until that task times out (10 s), then
    # writes them (seen 1 run in 6 on a loaded machine): read until they are there
    deadline = time.monotonic() + 30
    while True:
        history = await client.get_workflow_handle(session).fetch_history()
        started = [
            e.activity_task_started_event_attributes
            for e in history.events
            if e.HasField("activity_task_started_event_attributes")
        ]
        completed = [
            e.activity_task_completed_event_attributes
            for e in history.events
            if e.HasField("activity_task_completed_event_attributes")
        ]
        if len(completed) >= 6 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    shown = "\n".join(EventType.Name(e.event_type) for e in history.events)
    # model (describing the tools too), echo, model; then model, record and slow in turn 2
    assert len(completed) == len(started) == 6, shown
    assert len({s.identity for s in started}) == 1, started  # all on the stopped worker
    assert all(s.attempt == 1 for s in started)

    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    answered = [line for line in lines if line["message"].startswith("model ")]
    assert {(a["session_id"], a["turn"], a["cycle"]) for a in answered} >= {
        (session, 1, 1),
        (session, 1, 2),
    }
    assert all("activity_id" in a and "({" not in a["message"] for a in answered)
    assert any("shutting down" in line["message"] for line in lines)


async def attempts_started(client: Client, session: str) -> int:
    """Activity attempts of the session that started: recorded ones and running ones."""
    handle = client.get_workflow_handle(session)
    history = await handle.fetch_history()
    recorded = sum(e.HasField("activity_task_started_event_attributes") for e in history.events)
    pending = (await handle.describe()).raw_description.pending_activities
    return recorded + sum(1 for p in pending if p.last_started_time.seconds)


def http_get_quiet(url: str) -> int | None:
    try:
        return http_get(url)[0]
    except OSError:
        return None


def test_worker_help_lists_the_settings() -> None:
    result = keel("worker", "--help", env=keel_env())
    assert result.returncode == 0
    for flag in (
        "--health-port",
        "--metrics-port",
        "--otlp-endpoint",
        "--shutdown-grace",
        "--tls-cert",
        "--max-concurrent-activities",
    ):
        assert flag in result.stdout


# ----------------------------------------------------------------------------- TLS


def make_pki(directory: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, as PEM files."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def issue(
        name: str,
        issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
        usage: list[x509.ObjectIdentifier] | None = None,
        ip: str | None = None,
    ) -> tuple[x509.Name, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        signer_name, signer_key = issuer or (subject, key)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(signer_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), True)
        )
        if usage:
            builder = builder.add_extension(x509.ExtendedKeyUsage(usage), False)
        if ip:
            import ipaddress

            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))]), False
            )
        cert = builder.sign(signer_key, hashes.SHA256())
        (directory / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (directory / f"{name}.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return subject, key

    ca = issue("ca", None)
    issue("server", ca, [ExtendedKeyUsageOID.SERVER_AUTH], ip="127.0.0.1")
    issue("client", ca, [ExtendedKeyUsageOID.CLIENT_AUTH])
    return {n: directory / f"{n}.{ext}" for n in ("ca", "server", "client") for ext in ("pem",)} | {
        f"{n}-key": directory / f"{n}.key" for n in ("server", "client")
    }


class MtlsProxy:
    """Terminates TLS (client certificate required) in front of the plaintext dev server."""

    def __init__(self, pki: dict[str, Path], upstream: str) -> None:
        import ssl

        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(pki["server"], pki["server-key"])
        self.context.load_verify_locations(pki["ca"])
        self.context.verify_mode = ssl.CERT_REQUIRED
        self.context.set_alpn_protocols(["h2"])
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))
        self.handshakes: list[str] = []

    async def start(self) -> int:
        import asyncio

        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.context)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: Any, writer: Any) -> None:
        import asyncio

        peer = writer.get_extra_info("peercert") or {}
        subject = dict(x[0] for x in peer.get("subject", ()))
        self.handshakes.append(subject.get("commonName", "?"))
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)

        async def pipe(src: Any, dst: Any) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def stop(self) -> None:
        self.server.close()


async def test_keel_worker_connects_with_mtls(
    temporal_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    import asyncio

    pki = make_pki(tmp_path)
    upstream = temporal_env.client.service_client.config.target_host
    proxy = MtlsProxy(pki, upstream)
    port = await proxy.start()
    queue = f"mtls-{uuid.uuid4().hex[:8]}"
    env = keel_env(
        TEMPORAL_ADDRESS=f"127.0.0.1:{port}",
        KEEL_TASK_QUEUE=queue,
        KEEL_STORE=str(tmp_path / "store"),
        TEMPORAL_TLS_SERVER_CA_CERT_PATH=str(pki["ca"]),
    )

    def run_keel(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "keel.worker.cli", *args],
            env={**env, **extra},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=90,
        )

    try:
        # without a client certificate the proxy refuses the handshake
        refused = await asyncio.to_thread(run_keel, "sessions", "--json")
        assert refused.returncode == 1 and "cannot reach Temporal" in refused.stderr
        model = write_script(tmp_path / "s.json", [respond(text("over mTLS"))])
        creds = {
            "TEMPORAL_TLS_CLIENT_CERT_PATH": str(pki["client"]),
            "TEMPORAL_TLS_CLIENT_KEY_PATH": str(pki["client-key"]),
        }
        worker = subprocess.Popen(
            [sys.executable, "-m", "keel.worker.cli", "worker", "--tools", SAMPLE_TOOLS],
            env={**env, **creds},
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            ran = await asyncio.to_thread(
                run_keel, "run", "--json", "--model", model, "hello", **creds
            )
        finally:
            worker.send_signal(signal.SIGTERM)
            _, stderr = await asyncio.to_thread(worker.communicate, timeout=30)
        assert ran.returncode == 0, (ran.stderr, stderr)
        assert json.loads(ran.stdout)["message"]["content"] == [{"text": "over mTLS"}]
        assert worker.returncode == 0, stderr
        assert "client" in proxy.handshakes
    finally:
        await proxy.stop()


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("soon", "KEEL_JUDGE_TIMEOUT_S='soon' is not a number of seconds"),
        ("0", "must be more than 0 and at most 55 seconds"),
        ("120", "must be more than 0 and at most 55 seconds"),
        ("nan", "must be more than 0 and at most 55 seconds"),
    ],
)
def test_a_judge_timeout_that_is_no_timeout_is_named(raw: str, reason: str) -> None:
    assert Settings.from_env({}).judge_timeout_s() == 30
    assert Settings.from_env({"KEEL_JUDGE_TIMEOUT_S": "2.5"}).judge_timeout_s() == 2.5
    with pytest.raises(ConfigError, match=reason):
        Settings.from_env({"KEEL_JUDGE_TIMEOUT_S": raw}).judge_timeout_s()
