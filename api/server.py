"""Running the API under uvicorn: in the foreground (`outcomes serve`) or in a background
thread (the demo and tests that need a real HTTP server on 127.0.0.1).

Connection settings come from the environment (ledger.settings; docs/deploy.md, "Behind a
load balancer"): X-Forwarded-Proto/-For are believed only from OUTCOMES_FORWARDED_ALLOW_IPS,
and one process serves at most OUTCOMES_MAX_CONNECTIONS connections at once (past that,
uvicorn answers 503 and closes the connection). A connection that sends no request headers within
OUTCOMES_HEADER_TIMEOUT_S is closed, one client address holds at most
OUTCOMES_MAX_CONNECTIONS_PER_CLIENT, and connections that never asked make room for those that
do (api.connections)."""

from __future__ import annotations

import logging
import resource
import socket
import threading
import time
from typing import Any

import uvicorn

from api.app import create_app
from api.connections import guarded_protocol
from ledger.dispatch import Dispatcher
from ledger.runtime.ledger import Ledger
from ledger.settings import Settings, load_settings
from observability import logs, tracing

log = logging.getLogger(__name__)
# File descriptors a process keeps besides its clients' connections: the database pool, the
# broker, logs, the embedded worker's pipes.
SPARE_FILES = 64


def _config(
    ledger: Ledger | None,
    dispatcher: Dispatcher | None,
    host: str,
    port: int,
    log_level: str,
    log_config: dict[str, Any] | None = uvicorn.config.LOGGING_CONFIG,
    settings: Settings | None = None,
) -> uvicorn.Config:
    settings = settings or load_settings()
    return uvicorn.Config(
        create_app(ledger, dispatcher, settings=settings),
        host=host,
        port=port,
        log_level=log_level,
        log_config=log_config,
        access_log=False,  # request lines carry no tokens, but keep logs quiet by default
        # Never uvicorn's own default (trust 127.0.0.1, or FORWARDED_ALLOW_IPS): only the
        # proxies named in OUTCOMES_FORWARDED_ALLOW_IPS may say which scheme a client used.
        proxy_headers=bool(settings.forwarded_allow_ips),
        forwarded_allow_ips=list(settings.forwarded_allow_ips) or None,
        # uvicorn answers 503 once the open connections reach its limit, the asking one
        # counted: one more, so that OUTCOMES_MAX_CONNECTIONS connections are all served.
        limit_concurrency=settings.max_connections + 1,
        timeout_keep_alive=max(1, round(settings.keep_alive_s)),
        # The header timer, the per-address cap, idle connections making room (api.connections).
        http=guarded_protocol(settings),
    )


def connection_warning(settings: Settings) -> str | None:
    """A cap above what the process may open is no cap: accepts fail before it is reached."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or settings.max_connections + SPARE_FILES <= soft:
        return None
    return (
        f"OUTCOMES_MAX_CONNECTIONS is {settings.max_connections} but this process may open "
        f"{soft} files: raise the limit (ulimit -n {settings.max_connections + SPARE_FILES}) "
        "or lower OUTCOMES_MAX_CONNECTIONS"
    )


def serve(
    ledger: Ledger | None,
    dispatcher: Dispatcher | None,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
    *,
    settings: Settings | None = None,
    listener: socket.socket | None = None,
) -> None:
    """Serve until stopped; `settings`: the process's, when its starter read them already;
    `listener`: a socket its starter bound already (`outcomes serve` binds before it starts
    anything, so a taken port starts nothing)."""
    settings = settings or load_settings()
    log_format = settings.log_format
    logs.install(log_format, log_level.upper())
    tracing.install_from_env("outcome-ledger-api")  # when OTEL_* ask for it (docs/tracing.md)
    if warning := connection_warning(settings):
        log.warning("%s", warning)
    # JSON: uvicorn's own lines go through the root handler too, so every line is one object.
    own = None if log_format == "json" else uvicorn.config.LOGGING_CONFIG
    server = uvicorn.Server(_config(ledger, dispatcher, host, port, log_level, own, settings))
    server.run(sockets=None if listener is None else [listener])


class BackgroundServer:
    """A uvicorn server on a thread; `start()` returns once it accepts connections."""

    def __init__(
        self,
        ledger: Ledger,
        dispatcher: Dispatcher | None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._server = uvicorn.Server(_config(ledger, dispatcher, host, port, "warning"))
        self._thread = threading.Thread(target=self._server.run, name="api", daemon=True)

    @property
    def url(self) -> str:
        sockets = [s for server in self._server.servers for s in server.sockets]
        host, port = sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    def start(self, timeout_s: float = 20.0) -> str:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the API server did not start")
            time.sleep(0.02)  # polling uvicorn's own started flag
        return self.url

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
