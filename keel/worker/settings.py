"""Process settings, read from the environment when asked (never at import time).

``Settings`` is what every command reads: where Temporal is, how to reach it (TLS, API key),
the task queue and the conversation store. ``WorkerSettings`` adds what only ``keel worker``
needs: concurrency limits, graceful shutdown, health and metrics ports, tracing and logs.
Reading never fails; checking does: ``Settings.client_options()`` and ``WorkerSettings.load``
raise ``ConfigError`` naming the variable (or flag) and what is wrong with it.

The connection variables are Temporal's own (the ones the ``temporal`` CLI and the SDKs'
environment configuration read), so one environment serves both.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from temporalio.common import WorkerDeploymentVersion
from temporalio.service import TLSConfig

from keel.activities.prices import PriceTable, PriceTableError
from keel.activities.store.encrypted import EncryptionKeyError, Keyring, parse_key
from keel.workflows.activity_options import DEFAULT_JUDGE_TIMEOUT_S, MAX_JUDGE_TIMEOUT_S

DEFAULT_TASK_QUEUE = "keel"
DEFAULT_NAMESPACE = "default"
DEFAULT_ADDRESS = "127.0.0.1:7233"
DEFAULT_HOME = ".keel"
DEFAULT_SHUTDOWN_GRACE_S = 30.0
# A workflow task left on a dead worker's sticky queue moves to the shared queue after this
# (temporalio's default is 10 s; docs/guarantees.md, "Crashes").
DEFAULT_STICKY_TIMEOUT_S = 1.0
DEFAULT_SERVICE_NAME = "keel-worker"
# How long a function judge may think; the most it may be given stays under the judge
# activity's own start-to-close timeout (60 s), so a judge that hangs escalates with a reason.
# the longest deployment name or build id Temporal takes
MAX_VERSION_PART = 255
LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_GRPC_META_PREFIX = "TEMPORAL_GRPC_META_"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class ConfigError(ValueError):
    """A setting is invalid; the message names the variable or flag and what is wrong."""


@dataclass(frozen=True)
class ClientOptions:
    """How to reach Temporal, checked: keyword arguments for ``Client.connect``.

    Attributes:
        tls: False, or the TLS configuration (server CA, client certificate and key, name).
        api_key: sent as ``Authorization: Bearer <key>`` (Temporal Cloud API keys).
        rpc_metadata: extra gRPC headers for every call.
    """

    tls: bool | TLSConfig = False
    api_key: str | None = None
    rpc_metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Settings:
    """Where Temporal is, how to reach it, and which task queue Keel uses.

    Attributes:
        address: ``TEMPORAL_ADDRESS``; None when unset (the CLI may then embed a dev server).
        namespace: ``TEMPORAL_NAMESPACE``, default ``default``.
        task_queue: ``KEEL_TASK_QUEUE``, default ``keel``.
        model: ``KEEL_MODEL``, the model spec used when a command names none.
        home: ``KEEL_HOME``, where the embedded dev server keeps its database (``.keel``).
        store_spec: ``KEEL_STORE``, where conversations are stored: ``s3://bucket/prefix``
            for many workers, or a directory; default ``<home>/store``.
        api_key: ``TEMPORAL_API_KEY``, a Temporal Cloud API key; turns TLS on unless
            ``TEMPORAL_TLS=false``.
        tls: ``TEMPORAL_TLS`` as given (``true`` / ``false``); unset means TLS is on exactly
            when a certificate, CA, server name or API key is configured.
        tls_cert: ``TEMPORAL_TLS_CLIENT_CERT_PATH``, PEM client certificate (mTLS).
        tls_key: ``TEMPORAL_TLS_CLIENT_KEY_PATH``, PEM private key of that certificate.
        tls_ca: ``TEMPORAL_TLS_SERVER_CA_CERT_PATH``, PEM CA to verify the server with
            (default: the system's roots).
        tls_server_name: ``TEMPORAL_TLS_SERVER_NAME``, the name to expect on the server's
            certificate (SNI) when it differs from the address's host.
        tls_cert_data: ``TEMPORAL_TLS_CLIENT_CERT_DATA``, the certificate itself, instead of
            a path.
        tls_key_data: ``TEMPORAL_TLS_CLIENT_KEY_DATA``, the key itself.
        tls_ca_data: ``TEMPORAL_TLS_SERVER_CA_CERT_DATA``, the CA itself.
        rpc_metadata: ``TEMPORAL_GRPC_META_<NAME>=value`` variables, as gRPC headers
            (``<name>`` lower-cased, ``_`` becoming ``-``).
        encryption_key: ``KEEL_ENCRYPTION_KEY``, base64 of 32 bytes: encrypts every payload
            sent to Temporal and every stored object (AES-256-GCM).
        decryption_keys: ``KEEL_DECRYPTION_KEYS``, comma-separated older keys that still
            decrypt (rotation).
        deployment: ``KEEL_DEPLOYMENT``, the Worker Deployment a versioned worker belongs to
            (``keel worker --deployment``); None: an unversioned worker.
        build_id: ``KEEL_BUILD_ID``, this worker's version in that deployment (the image
            tag, say); given together with ``deployment``.
        request_log: ``KEEL_SCRIPTED_LOG``, a file every model request is appended to.
        notify_secret: ``KEEL_NOTIFY_SECRET``, the key that signs notifications.
        approver: ``KEEL_APPROVER``, who decides (default: the user's name).
        approver_key: ``KEEL_APPROVER_KEY``, the private key file decisions are signed with.
        codec_token: ``KEEL_CODEC_TOKEN``, the bearer token of ``keel codec-server``.
        ui_token, ui_key, ui_approver: ``KEEL_UI_TOKEN``, ``KEEL_UI_KEY``,
            ``KEEL_UI_APPROVER`` of ``keel ui``.
        temporal_cli: ``KEEL_TEMPORAL_CLI``, the ``temporal`` executable to embed.
        prices_file: ``KEEL_PRICES``, a TOML file whose ``[prices]`` table prices the
            fleet's models (``keel.activities.prices``); ``prices()`` reads it.
        judge_timeout: ``KEEL_JUDGE_TIMEOUT_S`` as given: how long a function judge may think
            before the call it judges goes to a person (``judge_timeout_s`` checks it).
        state_home: the user's state directory (``XDG_STATE_HOME``, else
            ``~/.local/state``): ``keel/`` in it keeps the records commands trust (the
            ``keel dev`` serving a folder, remembered tool files), out of any working folder.
        environ: the environment these were read from, once: what MCP server configurations
            name (``KEEL_MCP_<NAME>_ENV`` / ``_HEADERS``) is read from it.

    This is the one place Keel reads its environment (``tests/test_layout.py`` checks).
    """

    address: str | None
    namespace: str = DEFAULT_NAMESPACE
    task_queue: str = DEFAULT_TASK_QUEUE
    model: str | None = None
    home: str = DEFAULT_HOME
    store_spec: str | None = None
    api_key: str | None = None
    tls: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    tls_server_name: str | None = None
    tls_cert_data: str | None = None
    tls_key_data: str | None = None
    tls_ca_data: str | None = None
    rpc_metadata: tuple[tuple[str, str], ...] = ()
    encryption_key: str | None = field(default=None, repr=False)
    decryption_keys: str | None = field(default=None, repr=False)
    stream_listen: str | None = None
    stream_advertise: str | None = None
    deployment: str | None = None
    build_id: str | None = None
    request_log: str | None = None
    notify_secret: str | None = field(default=None, repr=False)
    approver: str | None = None
    approver_key: str | None = None
    codec_token: str | None = field(default=None, repr=False)
    ui_token: str | None = field(default=None, repr=False)
    ui_key: str | None = None
    ui_approver: str | None = None
    temporal_cli: str | None = None
    judge_timeout: str | None = None
    prices_file: str | None = None
    state_home: str | None = None
    environ: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def store(self) -> str:
        """The conversation store spec in force."""
        return self.store_spec or f"{self.home}/store"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read settings from ``env`` (default: ``os.environ``); never fails."""
        env = os.environ if env is None else env
        metadata = tuple(
            sorted(
                (key[len(_GRPC_META_PREFIX) :].lower().replace("_", "-"), value)
                for key, value in env.items()
                if key.startswith(_GRPC_META_PREFIX) and len(key) > len(_GRPC_META_PREFIX)
            )
        )
        return cls(
            address=env.get("TEMPORAL_ADDRESS") or None,
            namespace=env.get("TEMPORAL_NAMESPACE") or DEFAULT_NAMESPACE,
            task_queue=env.get("KEEL_TASK_QUEUE") or DEFAULT_TASK_QUEUE,
            model=env.get("KEEL_MODEL") or None,
            home=env.get("KEEL_HOME") or DEFAULT_HOME,
            store_spec=env.get("KEEL_STORE") or None,
            api_key=env.get("TEMPORAL_API_KEY") or None,
            tls=env.get("TEMPORAL_TLS") or None,
            tls_cert=env.get("TEMPORAL_TLS_CLIENT_CERT_PATH") or None,
            tls_key=env.get("TEMPORAL_TLS_CLIENT_KEY_PATH") or None,
            tls_ca=env.get("TEMPORAL_TLS_SERVER_CA_CERT_PATH") or None,
            tls_server_name=env.get("TEMPORAL_TLS_SERVER_NAME") or None,
            tls_cert_data=env.get("TEMPORAL_TLS_CLIENT_CERT_DATA") or None,
            tls_key_data=env.get("TEMPORAL_TLS_CLIENT_KEY_DATA") or None,
            tls_ca_data=env.get("TEMPORAL_TLS_SERVER_CA_CERT_DATA") or None,
            rpc_metadata=metadata,
            encryption_key=env.get("KEEL_ENCRYPTION_KEY") or None,
            decryption_keys=env.get("KEEL_DECRYPTION_KEYS") or None,
            stream_listen=env.get("KEEL_STREAM_LISTEN") or None,
            stream_advertise=env.get("KEEL_STREAM_ADVERTISE") or None,
            deployment=(env.get("KEEL_DEPLOYMENT") or "").strip() or None,
            build_id=(env.get("KEEL_BUILD_ID") or "").strip() or None,
            request_log=env.get("KEEL_SCRIPTED_LOG") or None,
            notify_secret=env.get("KEEL_NOTIFY_SECRET") or None,
            approver=env.get("KEEL_APPROVER") or None,
            approver_key=env.get("KEEL_APPROVER_KEY") or None,
            codec_token=env.get("KEEL_CODEC_TOKEN") or None,
            ui_token=env.get("KEEL_UI_TOKEN") or None,
            ui_key=env.get("KEEL_UI_KEY") or None,
            ui_approver=env.get("KEEL_UI_APPROVER") or None,
            temporal_cli=env.get("KEEL_TEMPORAL_CLI") or None,
            judge_timeout=env.get("KEEL_JUDGE_TIMEOUT_S") or None,
            prices_file=env.get("KEEL_PRICES") or None,
            state_home=_state_home(env),
            environ=dict(env),
        )

    def judge_timeout_s(self) -> float:
        """How long a function judge may think: 30 s by default, at most 55 s.

        The judge activity's own timeout is 60 s; a judge still thinking then escalates.

        Raises:
            ConfigError: ``KEEL_JUDGE_TIMEOUT_S`` is no number of seconds in (0, 55].
        """
        raw = self.judge_timeout
        if raw is None:
            return DEFAULT_JUDGE_TIMEOUT_S
        try:
            seconds = float(raw)
        except ValueError:
            raise ConfigError(f"KEEL_JUDGE_TIMEOUT_S={raw!r} is not a number of seconds") from None
        if not 0 < seconds <= MAX_JUDGE_TIMEOUT_S:
            raise ConfigError(
                f"KEEL_JUDGE_TIMEOUT_S={raw!r} must be more than 0 and at most "
                f"{MAX_JUDGE_TIMEOUT_S:g} seconds"
            )
        return seconds

    def prices(self) -> PriceTable:
        """The worker's price table, from ``KEEL_PRICES``; empty when it is unset.

        Raises:
            ConfigError: the file cannot be read, or its ``[prices]`` table is invalid.
        """
        if self.prices_file is None:
            return PriceTable()
        try:
            return PriceTable.load(self.prices_file)
        except PriceTableError as err:
            raise ConfigError(f"KEEL_PRICES: {err}") from None

    def deployment_version(self) -> WorkerDeploymentVersion | None:
        """The Worker Deployment Version a worker runs as, checked; None when unversioned.

        Raises:
            ConfigError: only one of ``KEEL_DEPLOYMENT`` and ``KEEL_BUILD_ID`` is set, or one
                is not a name Temporal takes.
        """
        if self.deployment is None and self.build_id is None:
            return None
        if self.deployment is None or self.build_id is None:
            given, missing = (
                ("KEEL_DEPLOYMENT", "KEEL_BUILD_ID")
                if self.deployment is not None
                else ("KEEL_BUILD_ID", "KEEL_DEPLOYMENT")
            )
            raise ConfigError(
                f"{given} is set but {missing} is not: a versioned worker needs both "
                "(--deployment NAME --build-id ID)"
            )
        _check_version_part(self.deployment, "KEEL_DEPLOYMENT", dots=False)
        _check_version_part(self.build_id, "KEEL_BUILD_ID", dots=True)
        return WorkerDeploymentVersion(self.deployment, self.build_id)

    def keyring(self) -> Keyring | None:
        """The encryption keys, checked; None when neither variable is set.

        Raises:
            ConfigError: a key is not base64 of 32 bytes (naming the variable).
        """
        if not self.encryption_key and not self.decryption_keys:
            return None
        try:
            encrypt = (
                parse_key(self.encryption_key, "KEEL_ENCRYPTION_KEY")
                if self.encryption_key
                else None
            )
            older = [
                parse_key(text, f"KEEL_DECRYPTION_KEYS (key {n})")
                for n, text in enumerate((self.decryption_keys or "").split(","), 1)
                if text.strip()
            ]
        except EncryptionKeyError as err:
            raise ConfigError(str(err)) from None
        return Keyring.of(encrypt, older)

    def client_options(self) -> ClientOptions:
        """Check the connection settings and read the TLS files.

        Raises:
            ConfigError: the address is not ``host:port``; ``TEMPORAL_TLS`` is not a
                boolean; a certificate comes without its key (or the reverse); a path and
                the data of the same item are both set; a file is missing, unreadable or
                not PEM; or TLS is turned off while TLS material is configured.
        """
        if self.address is not None:
            check_address(self.address, "TEMPORAL_ADDRESS")
        cert = _pem(self.tls_cert, self.tls_cert_data, "TEMPORAL_TLS_CLIENT_CERT")
        key = _pem(self.tls_key, self.tls_key_data, "TEMPORAL_TLS_CLIENT_KEY")
        ca = _pem(self.tls_ca, self.tls_ca_data, "TEMPORAL_TLS_SERVER_CA_CERT")
        if (cert is None) != (key is None):
            given, missing = (
                ("TEMPORAL_TLS_CLIENT_CERT_PATH", "TEMPORAL_TLS_CLIENT_KEY_PATH")
                if cert is not None
                else ("TEMPORAL_TLS_CLIENT_KEY_PATH", "TEMPORAL_TLS_CLIENT_CERT_PATH")
            )
            raise ConfigError(f"{given} is set but {missing} is not: mTLS needs both")
        material = cert is not None or ca is not None or self.tls_server_name is not None
        wanted = _boolean(self.tls, "TEMPORAL_TLS")
        if wanted is False and material:
            raise ConfigError(
                "TEMPORAL_TLS=false, but a TLS certificate, CA or server name is configured"
            )
        enabled = wanted if wanted is not None else material or self.api_key is not None
        tls: bool | TLSConfig = False
        if enabled:
            tls = TLSConfig(
                server_root_ca_cert=ca,
                domain=self.tls_server_name,
                client_cert=cert,
                client_private_key=key,
            )
        return ClientOptions(tls=tls, api_key=self.api_key, rpc_metadata=dict(self.rpc_metadata))


@dataclass(frozen=True)
class WorkerSettings:
    """What only ``keel worker`` needs, checked; each from a flag, else the environment.

    Attributes:
        max_concurrent_activities: ``KEEL_MAX_CONCURRENT_ACTIVITIES``: model calls and tool
            runs at once on this worker (default: Temporal's, 100).
        max_concurrent_workflow_tasks: ``KEEL_MAX_CONCURRENT_WORKFLOW_TASKS`` (default 100).
        max_cached_workflows: ``KEEL_MAX_CACHED_WORKFLOWS``: sessions kept in memory between
            their workflow tasks (default: Temporal's, 1000).
        shutdown_grace_s: ``KEEL_SHUTDOWN_GRACE_S``: after SIGTERM, how long running model
            calls and tools may finish before they are cancelled (and retried elsewhere).
        sticky_timeout_s: ``KEEL_STICKY_TIMEOUT_S``: how long a session's workflow task waits
            for the worker that has the session cached before any worker may take it (and
            replay its history); this is how soon a session whose worker died goes on.
        health_port: ``KEEL_HEALTH_PORT``: serve ``/healthz`` and ``/readyz`` on this port.
        metrics_port: ``KEEL_METRICS_PORT``: serve Temporal SDK metrics in Prometheus text
            format on ``/metrics`` on this port.
        otlp_endpoint: ``KEEL_OTLP_ENDPOINT``, else ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` /
            ``OTEL_EXPORTER_OTLP_ENDPOINT``: export traces there (OTLP over HTTP). None: no
            tracing.
        otlp_traces_url: the URL spans are posted to (the endpoint plus ``/v1/traces``
            unless a traces endpoint was given).
        service_name: ``OTEL_SERVICE_NAME``, default ``keel-worker``.
        log_format: ``KEEL_LOG_FORMAT``: ``text`` or ``json`` (one object per line).
        log_level: ``KEEL_LOG_LEVEL``: ``DEBUG`` ... ``CRITICAL``; None keeps the CLI's.
    """

    max_concurrent_activities: int | None = None
    max_concurrent_workflow_tasks: int | None = None
    max_cached_workflows: int | None = None
    shutdown_grace_s: float = DEFAULT_SHUTDOWN_GRACE_S
    sticky_timeout_s: float = DEFAULT_STICKY_TIMEOUT_S
    health_port: int | None = None
    metrics_port: int | None = None
    otlp_endpoint: str | None = None
    otlp_traces_url: str | None = None
    service_name: str = DEFAULT_SERVICE_NAME
    log_format: str = "text"
    log_level: str | None = None

    @classmethod
    def load(
        cls, env: Mapping[str, str] | None = None, flags: Mapping[str, str | None] | None = None
    ) -> WorkerSettings:
        """Read and check the worker settings; a flag given wins over its variable.

        Args:
            env: the environment (default ``os.environ``).
            flags: flag values by variable name (e.g. ``{"KEEL_METRICS_PORT": "9464"}``);
                None means the flag was not given.

        Raises:
            ConfigError: naming the flag or variable and what is wrong with its value.
        """
        source = _Source(os.environ if env is None else env, flags or {})
        health = source.port("KEEL_HEALTH_PORT")
        metrics = source.port("KEEL_METRICS_PORT")
        if health is not None and health == metrics:
            raise ConfigError(
                f"{source.label('KEEL_HEALTH_PORT')} and {source.label('KEEL_METRICS_PORT')} "
                f"are both {health}: use two ports"
            )
        grace = source.number("KEEL_SHUTDOWN_GRACE_S")
        sticky = source.number("KEEL_STICKY_TIMEOUT_S")
        if sticky is not None and sticky < 0.1:
            raise ConfigError(
                f"{source.label('KEEL_STICKY_TIMEOUT_S')}={sticky:g} must be 0.1 s or more"
            )
        endpoint, traces_url = source.otlp()
        log_format = (source.get("KEEL_LOG_FORMAT") or "text").lower()
        if log_format not in LOG_FORMATS:
            raise ConfigError(
                f"{source.label('KEEL_LOG_FORMAT')}={log_format!r}: use one of "
                f"{', '.join(LOG_FORMATS)}"
            )
        level = source.get("KEEL_LOG_LEVEL")
        if level is not None and level.upper() not in LOG_LEVELS:
            raise ConfigError(
                f"{source.label('KEEL_LOG_LEVEL')}={level!r}: use one of {', '.join(LOG_LEVELS)}"
            )
        return cls(
            max_concurrent_activities=source.count("KEEL_MAX_CONCURRENT_ACTIVITIES"),
            max_concurrent_workflow_tasks=source.count("KEEL_MAX_CONCURRENT_WORKFLOW_TASKS", 2),
            max_cached_workflows=source.count("KEEL_MAX_CACHED_WORKFLOWS", 0),
            shutdown_grace_s=DEFAULT_SHUTDOWN_GRACE_S if grace is None else grace,
            sticky_timeout_s=DEFAULT_STICKY_TIMEOUT_S if sticky is None else sticky,
            health_port=health,
            metrics_port=metrics,
            otlp_endpoint=endpoint,
            otlp_traces_url=traces_url,
            service_name=source.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE_NAME,
            log_format=log_format,
            log_level=level.upper() if level else None,
        )


# Flags of `keel worker` by the variable they override, for messages.
FLAG_NAMES = {
    "TEMPORAL_ADDRESS": "--address",
    "TEMPORAL_NAMESPACE": "--namespace",
    "KEEL_TASK_QUEUE": "--task-queue",
    "KEEL_DEPLOYMENT": "--deployment",
    "KEEL_BUILD_ID": "--build-id",
    "KEEL_MAX_CONCURRENT_ACTIVITIES": "--max-concurrent-activities",
    "KEEL_MAX_CONCURRENT_WORKFLOW_TASKS": "--max-concurrent-workflow-tasks",
    "KEEL_MAX_CACHED_WORKFLOWS": "--max-cached-workflows",
    "KEEL_SHUTDOWN_GRACE_S": "--shutdown-grace",
    "KEEL_HEALTH_PORT": "--health-port",
    "KEEL_METRICS_PORT": "--metrics-port",
    "KEEL_OTLP_ENDPOINT": "--otlp-endpoint",
    "KEEL_LOG_FORMAT": "--log-format",
    "KEEL_LOG_LEVEL": "--log-level",
}


class _Source:
    """Values by variable name: the flag when given, else the environment."""

    def __init__(self, env: Mapping[str, str], flags: Mapping[str, str | None]) -> None:
        self.env = env
        self.flags = flags

    def get(self, name: str) -> str | None:
        flag = self.flags.get(name)
        if flag is not None:
            return flag.strip() or None
        return (self.env.get(name) or "").strip() or None

    def label(self, name: str) -> str:
        return FLAG_NAMES.get(name, name) if self.flags.get(name) is not None else name

    def count(self, name: str, minimum: int = 1) -> int | None:
        raw = self.get(name)
        if raw is None:
            return None
        try:
            value = int(raw)
        except ValueError:
            raise ConfigError(f"{self.label(name)}={raw!r} is not a whole number") from None
        if value < minimum:
            raise ConfigError(f"{self.label(name)}={raw!r} must be at least {minimum}")
        return value

    def number(self, name: str) -> float | None:
        raw = self.get(name)
        if raw is None:
            return None
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"{self.label(name)}={raw!r} is not a number of seconds") from None
        if not 0 <= value < float("inf"):
            raise ConfigError(f"{self.label(name)}={raw!r} must be 0 or more seconds")
        return value

    def port(self, name: str) -> int | None:
        raw = self.get(name)
        if raw is None:
            return None
        if not raw.isdigit() or not 1 <= int(raw) <= 65535:
            raise ConfigError(f"{self.label(name)}={raw!r} is not a port number (1-65535)")
        return int(raw)

    def otlp(self) -> tuple[str | None, str | None]:
        """The OTLP endpoint in force and the URL spans are posted to."""
        for name, suffix in (
            ("KEEL_OTLP_ENDPOINT", "/v1/traces"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ""),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "/v1/traces"),
        ):
            raw = self.get(name)
            if raw is None:
                continue
            url = urlparse(raw)
            if url.scheme not in ("http", "https") or not url.hostname:
                raise ConfigError(
                    f"{self.label(name)}={raw!r} is not an http(s) URL such as "
                    "http://otel-collector:4318"
                )
            return raw, raw.rstrip("/") + suffix
        return None, None


def check_address(address: str, name: str) -> None:
    """Check that ``address`` is ``host:port``.

    Raises:
        ConfigError: naming ``name`` when it is not.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f"{name}={address!r} is not host:port (e.g. temporal.example:7233)")


def _check_version_part(value: str, name: str, *, dots: bool) -> None:
    """Check a deployment name or build id: printable, no spaces, at most 255 characters.

    A deployment name has no ``.`` either: Temporal writes a version as ``NAME.BUILD_ID``.
    """
    if len(value) > MAX_VERSION_PART:
        raise ConfigError(f"{name} has {len(value)} characters: at most {MAX_VERSION_PART}")
    if not value.isprintable() or any(c.isspace() for c in value):
        raise ConfigError(f"{name}={value!r} has a space or a control character")
    if not dots and "." in value:
        raise ConfigError(f"{name}={value!r} has a '.': a deployment name cannot")
    if value.startswith("__"):
        raise ConfigError(f"{name}={value!r}: names starting with '__' are Temporal's")


def _boolean(raw: str | None, name: str) -> bool | None:
    if raw is None:
        return None
    if raw.strip().lower() in _TRUE:
        return True
    if raw.strip().lower() in _FALSE:
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean (true or false)")


def _pem(path: str | None, data: str | None, stem: str) -> bytes | None:
    """The PEM bytes of one TLS item, from its ``_PATH`` or its ``_DATA`` variable."""
    if path is not None and data is not None:
        raise ConfigError(f"both {stem}_PATH and {stem}_DATA are set: choose one")
    if data is not None:
        content, origin = data.encode(), f"{stem}_DATA"
    elif path is not None:
        origin = f"{stem}_PATH={path}"
        try:
            content = Path(path).read_bytes()
        except FileNotFoundError:
            raise ConfigError(f"{origin}: no such file") from None
        except OSError as err:
            raise ConfigError(f"{origin}: cannot read: {err.strerror or err}") from None
    else:
        return None
    if b"-----BEGIN " not in content:
        raise ConfigError(f"{origin}: not a PEM file (no -----BEGIN line)")
    return content


def _state_home(env: Mapping[str, str]) -> str:
    """The user's state directory: ``XDG_STATE_HOME`` if absolute, else ``~/.local/state``.

    A relative ``XDG_STATE_HOME`` is ignored, as the XDG spec says; ``~`` is ``HOME``, else
    the account's home directory.
    """
    given = env.get("XDG_STATE_HOME") or ""
    if os.path.isabs(given):
        return given
    home = env.get("HOME") or str(Path("~").expanduser())
    return str(Path(home) / ".local" / "state")
