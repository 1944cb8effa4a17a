"""A TCP fault proxy: every product process reaches PostgreSQL and RabbitMQ through one, so the
nemesis can cut all live connections at once (each side sees a reset, as after a network
partition heals) or stall them (bytes held, nothing closed: a frozen network).

asyncio on a thread of its own; `cut()` and `stall()` are called from any thread.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from contextlib import suppress

from nemesis.services import free_port

CHUNK = 65536


class FaultProxy:
    def __init__(self, name: str, upstream_port: int) -> None:
        self.name = name
        self.upstream_port = upstream_port
        self.port = free_port()
        self.cuts = 0
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        self._stalled_until = 0.0  # loop time; before it no byte is forwarded
        self._server: asyncio.Server | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"proxy-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"proxy {self.name} did not start")

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._serve())
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._hold()
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:  # the service is down: the client sees a closed connection
            _abort(writer)
            return
        pair = {writer, up_writer}
        self._writers |= pair
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            self._writers -= pair
            for side in pair:
                _abort(side)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while chunk := await reader.read(CHUNK):
                await self._hold()
                writer.write(chunk)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            _abort(writer)

    async def _hold(self) -> None:
        while (left := self._stalled_until - time.monotonic()) > 0:
            await asyncio.sleep(min(left, 0.05))

    def cut(self) -> int:
        """Reset every live connection; the number cut."""

        def cut_all() -> int:
            writers = list(self._writers)
            for writer in writers:
                _abort(writer)
            return len(writers) // 2

        cut = asyncio.run_coroutine_threadsafe(_call(cut_all), self._loop).result(10)
        self.cuts += 1
        return cut

    def stall(self, seconds: float) -> None:
        """Hold every byte (and new connections) for `seconds`, closing nothing."""
        self._stalled_until = max(self._stalled_until, time.monotonic() + seconds)

    def stop(self) -> None:
        if not self._loop.is_running():
            return

        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for writer in list(self._writers):
                _abort(writer)

        with suppress(Exception):
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


async def _call(function: object) -> int:
    assert callable(function)
    return int(function())


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with a reset (SO_LINGER 0), not a polite FIN: what a dropped connection looks like."""
    transport = writer.transport
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()
