"""A TCP fault proxy: every product process reaches PostgreSQL and RabbitMQ through one, so the
nemesis can cut all live connections at once (each side sees a reset, as after a network
partition heals) or stall them (bytes held, nothing closed: a frozen network).

It runs as a process of its own (`python -m nemesis.proxy`): forwarding every database and
broker byte of the product in the campaign's process would compete with the workload's
clients for one interpreter lock. The campaign drives it through `FaultProxy` over a control
port on 127.0.0.1: one line per command, `cut` (answers the number of connections reset) or
`stall SECONDS` (answers `ok`).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import struct
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

from nemesis.services import accepts, free_port, kill_group, wait_for

CHUNK = 65536


class ProxyServer:
    """The forwarding itself (inside the proxy process)."""

    def __init__(self, port: int, upstream_port: int) -> None:
        self.port = port
        self.upstream_port = upstream_port
        self._writers: set[asyncio.StreamWriter] = set()
        self._stalled_until = 0.0  # monotonic; before it no byte is forwarded

    async def serve(self, control_port: int) -> None:
        data = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        control = await asyncio.start_server(self._control, "127.0.0.1", control_port)
        async with data, control:
            await asyncio.gather(data.serve_forever(), control.serve_forever())

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

    async def _control(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with suppress(OSError):
            while line := (await reader.readline()).decode().split():
                if line[0] == "cut":
                    cut = list(self._writers)
                    for side in cut:
                        _abort(side)
                    writer.write(f"{len(cut) // 2}\n".encode())
                elif line[0] == "stall":
                    until = time.monotonic() + float(line[1])
                    self._stalled_until = max(self._stalled_until, until)
                    writer.write(b"ok\n")
                await writer.drain()
        writer.close()


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with a reset (SO_LINGER 0), not a polite FIN: what a dropped connection looks like."""
    transport = writer.transport
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


class FaultProxy:
    """The campaign's handle on one proxy process."""

    def __init__(self, name: str, upstream_port: int, logs: Path) -> None:
        self.name = name
        self.upstream_port = upstream_port
        self.port = free_port()
        self.control_port = free_port()
        self.logs = logs
        self.cuts = 0
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [sys.executable, "-m", "nemesis.proxy", str(self.port), str(self.upstream_port)]
        with (self.logs / f"proxy-{self.name}.log").open("ab") as log:
            self.process = subprocess.Popen(
                [*argv, str(self.control_port)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=Path(__file__).resolve().parents[1],
            )
        wait_for(lambda: accepts(self.control_port), 30, f"proxy {self.name}")

    def _ask(self, command: str) -> str:
        with socket.create_connection(("127.0.0.1", self.control_port), timeout=10) as conn:
            conn.sendall(command.encode() + b"\n")
            return conn.makefile().readline().strip()

    def cut(self) -> int:
        """Reset every live connection; the number cut."""
        self.cuts += 1
        return int(self._ask("cut"))

    def stall(self, seconds: float) -> None:
        """Hold every byte (and new connections) for `seconds`, closing nothing."""
        self._ask(f"stall {seconds}")

    def stop(self) -> None:
        if self.process is not None:
            kill_group(self.process.pid)
            with suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m nemesis.proxy")
    parser.add_argument("port", type=int)
    parser.add_argument("upstream_port", type=int)
    parser.add_argument("control_port", type=int)
    args = parser.parse_args(argv)
    asyncio.run(ProxyServer(args.port, args.upstream_port).serve(args.control_port))


if __name__ == "__main__":
    main(sys.argv[1:])
