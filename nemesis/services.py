"""The campaign's own PostgreSQL cluster and RabbitMQ node, in a temporary folder, on free
ports: the nemesis restarts them, so they must be nobody else's (other test runs share the
machine's services). Both are stopped by pid at the end, error or not (`Reaper`)."""

from __future__ import annotations

import atexit
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

PG_BIN = Path(os.environ.get("NEMESIS_PG_BIN", "/usr/lib/postgresql/15/bin"))
RABBIT_BIN = Path(os.environ.get("NEMESIS_RABBIT_BIN", "/usr/lib/rabbitmq/bin"))
READY_S = 60.0


class ServiceError(RuntimeError):
    """A private service did not start (the campaign cannot run)."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def accepts(port: int, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def wait_for(ready: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Poll `ready` until true; the seconds it took. Raises ServiceError past the timeout."""
    began = time.monotonic()
    while not ready():
        if time.monotonic() - began > timeout_s:
            raise ServiceError(f"{what} not ready after {timeout_s:g} s")
        time.sleep(0.1)  # polling a port or a process: there is no event to wait on
    return time.monotonic() - began


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


class Reaper:
    """Everything the campaign started, stopped at exit even if the campaign crashed."""

    def __init__(self) -> None:
        self._stops: list[Callable[[], None]] = []
        atexit.register(self.run)

    def add(self, stop: Callable[[], None]) -> None:
        self._stops.append(stop)

    def run(self) -> None:
        while self._stops:
            stop = self._stops.pop()
            with suppress(Exception):
                stop()


def _as_postgres() -> list[str]:
    """initdb and the postmaster refuse to run as root: run them as `postgres` then."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


class Restartable(ABC):
    """A private service the nemesis crashes (kill -9) and starts again."""

    restarts = 0  # how many times `restart` brought it back

    @abstractmethod
    def crash(self) -> None: ...

    @abstractmethod
    def start(self) -> float: ...

    def restart(self) -> float:
        """Crash, then start again; the seconds it was away."""
        began = time.monotonic()
        self.crash()
        self.start()
        self.restarts += 1
        return time.monotonic() - began


class PrivatePostgres(Restartable):
    """`initdb` into a temp dir (trust auth, fsync on), served on 127.0.0.1:<port>."""

    def __init__(self, home: Path) -> None:
        self.home = home / "pg"
        self.data = self.home / "data"
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str, check: bool = True) -> None:
        subprocess.run(
            [*_as_postgres(), *argv],
            check=check,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=READY_S,
        )

    def init(self) -> None:
        self.home.mkdir(parents=True)
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(self.home, owner.pw_uid, owner.pw_gid)
        self._run(str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres")
        self.start()

    def start(self) -> float:
        options = (
            f"-p {self.port} -k {self.home} -c listen_addresses=127.0.0.1 "
            "-c max_connections=300 -c shared_buffers=32MB"
        )
        pg_ctl = str(PG_BIN / "pg_ctl")
        log = str(self.home / "postgres.log")
        self._run(pg_ctl, "-D", str(self.data), "-l", log, "-w", "start", "-o", options)
        return wait_for(lambda: accepts(self.port), READY_S, "private postgres")

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def crash(self) -> None:
        """kill -9 of the postmaster and its backends: every connection dies, nothing flushed
        beyond what was committed (fsync is on)."""
        pid = self.postmaster_pid()
        if pid is not None:
            kill_group(pid)  # pg_ctl starts the postmaster as a session leader
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not accepts(self.port, 0.2), 10, "postgres to die")
        # The backends exit once their postmaster is gone; a leftover pid file blocks start.
        wait_for(lambda: not _alive_pid_file(self.data / "postmaster.pid"), 10, "pg backends")

    def stop(self) -> None:
        pg_ctl = str(PG_BIN / "pg_ctl")
        with suppress(Exception):
            self._run(pg_ctl, "-D", str(self.data), "-w", "-t", "10", "stop", "-m", "immediate")
        pid = self.postmaster_pid()
        if pid is not None and _alive(pid):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _alive_pid_file(path: Path) -> bool:
    try:
        return _alive(int(path.read_text().split()[0]))
    except (OSError, ValueError, IndexError):
        return False


class PrivateRabbit(Restartable):
    """A RabbitMQ node of its own (name, ports, mnesia, logs, cookie in a temp dir; no
    plugins), so the nemesis can kill it without touching the machine's broker."""

    def __init__(self, home: Path) -> None:
        self.home = home / "rabbit"
        self.port = free_port()
        self.dist_port = free_port()
        self.node = f"nemesis-{self.port}@localhost"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
        return env | {
            "HOME": str(self.home),  # its own Erlang cookie
            "RABBITMQ_CONF_ENV_FILE": str(self.home / "rabbitmq-env.conf"),  # not /etc's
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.home / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.home / "log"),
            "RABBITMQ_CONFIG_FILE": str(self.home / "rabbitmq"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.home / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(self.home / "rabbit.pid"),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        }

    def init(self) -> None:
        self.home.mkdir(parents=True)
        (self.home / "rabbitmq-env.conf").write_text("")
        (self.home / "enabled_plugins").write_text("[].\n")
        (self.home / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.port}\n"
            "loopback_users = none\n"
            # A shared 2-CPU machine: the default disk alarm (50 MB) and memory watermark
            # are fine; only keep the node from spending a CPU on statistics.
            "collect_statistics = none\n"
        )
        self.start()

    def start(self) -> float:
        log = (self.home / "server.log").open("ab")
        self.process = subprocess.Popen(
            [str(RABBIT_BIN / "rabbitmq-server")],
            env=self.env(),
            cwd=self.home,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: a kill takes beam and its helpers
        )
        log.close()
        return wait_for(self._ready, READY_S, "private rabbitmq")

    def up(self) -> bool:
        return self.process is not None and self.process.poll() is None and accepts(self.port)

    def _ready(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise ServiceError(f"rabbitmq exited; see {self.home / 'server.log'}")
        return accepts(self.port)

    def crash(self) -> None:
        """kill -9 of the node: unacked and unsynced messages may be lost or come back."""
        if self.process is not None:
            kill_group(self.process.pid)
            with suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)
        wait_for(lambda: not accepts(self.port, 0.2), 10, "rabbitmq to die")

    def stop(self) -> None:
        """A throwaway node: kill -9 (a polite stop takes seconds and keeps nothing we need)."""
        if self.process is not None:
            kill_group(self.process.pid)
            with suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
