"""The product under test, whole: a private PostgreSQL and RabbitMQ, a fault proxy in front of
each, the API, the workers and the reconciler as `outcomes` processes. Implements what the
nemesis may do to it (`nemesis.faults.Target`) and `heal()`, which undoes whatever is left."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from nemesis.processes import Api, ProductProcess, environ_for, run_cli, wait_worker_ready
from nemesis.proxy import FaultProxy
from nemesis.services import PrivatePostgres, PrivateRabbit, Reaper, ServiceError
from nemesis.truth import TRUTH_ENV

BRAKE_RETRY_S = 120.0  # the operator keeps trying a pull (or release) while Postgres is away


@dataclass(frozen=True)
class Shape:
    workers: int = 2
    worker_threads: int = 8
    lease_s: float = 4.0
    dispatch_timeout_s: float = 4.0
    reconcile_interval_s: float = 1.0
    tools: str = "nemesis.tools"  # OUTCOMES_TOOLS (a test adds a module that breaks the build)


class Cluster:
    def __init__(self, home: Path, shape: Shape, queue: str, reaper: Reaper) -> None:
        self.home = home
        self.shape = shape
        self.queue = queue
        self.reaper = reaper
        self.logs = home / "logs"
        self.truth_path = home / "truth.jsonl"
        self.postgres = PrivatePostgres(home)
        self.rabbit = PrivateRabbit(home)
        self.proxies: dict[str, FaultProxy] = {}
        self.api: Api | None = None
        self.workers: list[ProductProcess] = []
        self.reconciler: ProductProcess | None = None
        self.token = ""
        self._lock = threading.Lock()

    # --- start and stop ----------------------------------------------------------------------

    def start(self) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        self.home.chmod(0o755)  # the postgres user must reach its data directory below
        self.reaper.add(self.rabbit.stop)
        rabbit = threading.Thread(target=self.rabbit.init, name="rabbit-start")
        rabbit.start()  # the node takes seconds to boot: meanwhile Postgres starts, is migrated
        self.reaper.add(self.postgres.stop)
        self.postgres.init()
        run_cli(self.admin_env(), "migrate")
        rabbit.join()
        if not self.rabbit.up():
            raise ServiceError(f"rabbitmq did not start; see {self.rabbit.home}")
        for name, port in (("postgres", self.postgres.port), ("rabbitmq", self.rabbit.port)):
            proxy = FaultProxy(name, port, self.logs)
            proxy.start()
            self.reaper.add(proxy.stop)
            self.proxies[name] = proxy
        made = run_cli(
            self.admin_env(),
            "tokens",
            "create",
            "--account",
            "nemesis",
            "--role",
            "agent",
            "--json",
        )
        self.token = json.loads(made)["token"]
        self.api = Api(self.env(), self.logs)
        self._own(self.api)
        self.api.wait_healthy()
        for index in range(self.shape.workers):
            threads = str(self.shape.worker_threads)
            worker = ProductProcess(
                f"worker{index}", ["worker", "-c", threads], self.env(), self.logs
            )
            self._own(worker)
            self.workers.append(worker)
        for worker in self.workers:
            wait_worker_ready(worker)
        interval = str(self.shape.reconcile_interval_s)
        self.reconciler = ProductProcess(
            "reconciler", ["reconcile", "--interval", interval], self.env(), self.logs
        )
        self._own(self.reconciler)

    def _own(self, process: ProductProcess) -> None:
        process.start()
        self.reaper.add(process.stop)

    def stop_product(self) -> None:
        for process in self.processes():
            process.terminate()  # all at once: each takes its own seconds to wind down
        for process in self.processes():
            process.stop()

    def env(self) -> dict[str, str]:
        """The product's environment: every connection through a fault proxy."""
        pg, amqp = self.proxies["postgres"].port, self.proxies["rabbitmq"].port
        database = self.postgres.url.replace(f":{self.postgres.port}/", f":{pg}/")
        broker = self.rabbit.url.replace(f":{self.rabbit.port}/", f":{amqp}/")
        return environ_for(database, broker, self.queue, self._settings())

    def admin_env(self) -> dict[str, str]:
        """The operator's and auditor's environment: straight to the database."""
        return environ_for(self.postgres.url, self.rabbit.url, self.queue, self._settings())

    def _settings(self) -> dict[str, str]:
        return {
            "OUTCOMES_TOOLS": self.shape.tools,
            "OUTCOMES_LEASE_S": str(self.shape.lease_s),
            "OUTCOMES_DISPATCH_TIMEOUT_S": str(self.shape.dispatch_timeout_s),
            "OUTCOMES_PREFETCH": "2",
            TRUTH_ENV: str(self.truth_path),
        }

    def processes(self) -> list[ProductProcess]:
        return [p for p in [self.api, *self.workers, self.reconciler] if p is not None]

    # --- what the nemesis may do (nemesis.faults.Target) -------------------------------------

    def worker_pid(self, index: int) -> int:
        return self.workers[index].pid

    def kill_worker(self, index: int, down_s: float) -> None:
        worker = self.workers[index]
        worker.kill()
        time.sleep(down_s)  # down for a while before its supervisor restarts it
        worker.start()

    def freeze_worker(self, index: int, hold_s: float) -> None:
        _freeze(self.workers[index], hold_s)

    def kill_api(self, down_s: float) -> int:
        assert self.api is not None
        pid = self.api.pid
        self.api.kill()
        time.sleep(down_s)
        self.api.start()
        return pid

    def freeze_api(self, hold_s: float) -> int:
        assert self.api is not None
        return _freeze(self.api, hold_s)

    def kill_reconciler(self, down_s: float) -> int:
        assert self.reconciler is not None
        pid = self.reconciler.pid
        self.reconciler.kill()
        time.sleep(down_s)
        self.reconciler.start()
        return pid

    def freeze_reconciler(self, hold_s: float) -> int:
        assert self.reconciler is not None
        return _freeze(self.reconciler, hold_s)

    def restart_postgres(self) -> float:
        return self.postgres.restart()

    def restart_rabbit(self) -> float:
        return self.rabbit.restart()

    def cut(self, service: str) -> int:
        return self.proxies[service].cut()

    def stall(self, service: str, hold_s: float) -> None:
        self.proxies[service].stall(hold_s)
        time.sleep(hold_s)  # the fault lasts as long as the stall

    def pull_brake(self) -> str:
        out = self._operator("brake", "pull", "--scope", "global", "--reason", "nemesis", "--json")
        return str(json.loads(out)["brake_id"])

    def release_brake(self, brake_id: str) -> None:
        self._operator("brake", "release", brake_id, "--reason", "nemesis over", "--json")

    def _operator(self, *args: str) -> str:
        """An operator at the CLI: a command that failed (Postgres away) is typed again."""
        deadline = time.monotonic() + BRAKE_RETRY_S
        while True:
            try:
                return run_cli(self.admin_env(), *args, "--operator", "nemesis")
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)  # an operator's pause before typing it again

    # --- after the nemesis -------------------------------------------------------------------

    def heal(self) -> None:
        """Every process running and not frozen, every service up (faults end themselves; this
        is the safety net for one that failed half-way)."""
        for process in self.processes():
            if process.stopped:
                process.thaw()
            if not process.alive():
                process.start()
        if self.api is not None:
            self.api.wait_healthy()


def _freeze(process: ProductProcess, hold_s: float) -> int:
    pid = process.pid
    process.freeze()
    time.sleep(hold_s)  # frozen this long: the schedule's choice
    process.thaw()
    return pid
