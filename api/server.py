"""Running the API under uvicorn: in the foreground (`outcomes serve`) or in a background
thread (the demo and tests that need a real HTTP server on 127.0.0.1)."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn

from api.app import create_app
from ledger.dispatch import Dispatcher
from ledger.services.ledger import Ledger
from ledger.settings import load_settings
from observability import logs


def _config(
    ledger: Ledger | None,
    dispatcher: Dispatcher | None,
    host: str,
    port: int,
    log: str,
    log_config: dict[str, Any] | None = uvicorn.config.LOGGING_CONFIG,
) -> uvicorn.Config:
    return uvicorn.Config(
        create_app(ledger, dispatcher),
        host=host,
        port=port,
        log_level=log,
        log_config=log_config,
        access_log=False,  # request lines carry no tokens, but keep logs quiet by default
        proxy_headers=False,
    )


def serve(
    ledger: Ledger | None,
    dispatcher: Dispatcher | None,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
) -> None:
    log_format = load_settings().log_format
    logs.install(log_format, log_level.upper())
    # JSON: uvicorn's own lines go through the root handler too, so every line is one object.
    own = None if log_format == "json" else uvicorn.config.LOGGING_CONFIG
    uvicorn.Server(_config(ledger, dispatcher, host, port, log_level, own)).run()


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
