"""The Temporal dev server of one benchmark run: in-memory or on a SQLite file."""

from __future__ import annotations

import subprocess
from pathlib import Path

from keel.worker.server.devserver import DevServer, find_temporal_cli

PERSISTENCE = ("memory", "sqlite")


def bench_server(persistence: str, data_dir: Path, dynamic_config: tuple[str, ...]) -> DevServer:
    """Keel's ``DevServer``, headless, quiet, in memory or on ``data_dir/temporal.db``.

    Args:
        persistence: ``memory`` (the dev server's in-memory SQLite) or ``sqlite`` (a file
            under ``data_dir``, as Keel's embedded server uses).
        data_dir: where the SQLite file and the server log go.
        dynamic_config: extra ``--dynamic-config-value`` settings (``key=value``).

    Raises:
        ValueError: an unknown persistence.
    """
    if persistence not in PERSISTENCE:
        raise ValueError(f"persistence must be one of {PERSISTENCE}, not {persistence!r}")
    return DevServer(
        data_dir,
        ui=False,
        log_level="error",
        startup_timeout_s=60,
        in_memory=persistence == "memory",
        dynamic_config=dynamic_config,
    )


def describe(server: DevServer) -> str:
    """What ran: the CLI's version, the persistence and the dynamic config."""
    cli = find_temporal_cli()
    version = "?"
    if cli is not None:
        done = subprocess.run([cli, "--version"], capture_output=True, text=True, check=False)
        version = done.stdout.strip()
    where = "in-memory SQLite" if server.in_memory else f"SQLite file {server.db_path}"
    persistence = "memory" if server.in_memory else "sqlite"
    config = ", ".join(server.dynamic_config) or "stock settings"
    return (
        f"temporal dev server ({version}), persistence={persistence} ({where}), "
        f"dynamic config: {config}"
    )
