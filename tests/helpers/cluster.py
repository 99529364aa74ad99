"""A small production-shaped cluster: a Temporal dev server, the emulator and `devicepool
worker` processes (the real entry point) on free ports, each logging to a file.

`running_cluster` starts the server (or takes one `temporal_server` started for several
tests, each test in a namespace of its own) and the emulator and writes the workers'
config; `Cluster.start_worker` starts one more worker, optionally from another build's
source tree (`source`: a folder holding that build's `devicepool` package, put first on
`PYTHONPATH`, run with this environment's dependencies). On exit every process gets
SIGTERM, then SIGKILL after 10 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from devicepool import testing as ground_truth
from devicepool.api.names import SEARCH_ATTRIBUTES
from devicepool.client.dev import find_temporal
from devicepool.client.errors import DevicePoolError
from devicepool.testing import eventually, free_ports


def base_env() -> dict[str, str]:
    """This environment without its Temporal and devicepool settings."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TEMPORAL_") and not k.startswith("DEVICEPOOL_")
    }


def spawn(log_path: Path, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log_path.open("ab") as log:
        return subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            # Not the checkout: its `devicepool/` folder would shadow `PYTHONPATH`.
            cwd=log_path.parent,
            start_new_session=True,
        )


def stop(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to each, last started first; SIGKILL to any still running 10 s later."""
    for process in reversed(processes):
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)


@dataclass(frozen=True)
class TemporalServer:
    port: int
    log: Path


@contextmanager
def temporal_server(tmp: Path, *, namespaces: Sequence[str] = ()) -> Iterator[TemporalServer]:
    """A Temporal dev server with the pool search attributes, on a free port, with
    `namespaces` made beside `default` (each gets the search attributes too)."""
    (port,) = free_ports(1)
    command = [find_temporal(), "server", "start-dev", "--headless", "--ip", "127.0.0.1"]
    command += ["--port", str(port), "--log-level", "warn"]
    for name, type_ in SEARCH_ATTRIBUTES.items():
        command += ["--search-attribute", f"{name}={type_}"]
    for namespace in namespaces:
        command += ["--namespace", namespace]
    log = tmp / "temporal.log"
    process = spawn(log, command, base_env())
    try:
        yield TemporalServer(port, log)
    finally:
        stop([process])


@dataclass
class Cluster:
    tmp: Path
    server: TemporalServer
    namespace: str
    emulator_port: int
    api_key: str
    base_env: dict[str, str]
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    workers: list[tuple[subprocess.Popen[bytes], int]] = field(default_factory=list)

    @property
    def emulator(self) -> str:
        return f"http://127.0.0.1:{self.emulator_port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    def spawn(self, name: str, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        process = spawn(self.tmp / f"{name}.log", args, env)
        self.processes.append(process)
        return process

    def start_worker(self, *, source: Path | None = None) -> tuple[subprocess.Popen[bytes], int]:
        """One more `devicepool worker` on the shared config (from `source` if given)."""
        (port,) = free_ports(1)
        env = {
            **self.base_env,
            "TEMPORAL_ADDRESS": self.address,
            "TEMPORAL_NAMESPACE": self.namespace,
            "DEVICEPOOL_METRICS_HOST": "127.0.0.1",
            "DEVICEPOOL_GRACEFUL_SHUTDOWN_SECONDS": "2",
            "PYTHONUNBUFFERED": "1",
        }
        if source is not None:
            env["PYTHONPATH"] = str(source)
        command = [sys.executable, "-m", "devicepool.client", "worker"]
        command += ["--config", str(self.tmp / "worker.yaml"), "--metrics-port", str(port)]
        process = self.spawn(f"worker-{len(self.workers)}", command, env)
        self.workers.append((process, port))
        return process, port

    def logs(self) -> str:
        logs = {self.server.log, *self.tmp.glob("*.log")}
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}" for path in sorted(logs)
        )

    # `verify=False` on these plain-HTTP clients: no CA bundle loaded for nothing, which
    # cost ~17 ms of CPU a client, and the waits make a client a poll.
    async def stats(self) -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=self.emulator, timeout=5, verify=False) as http:
            return await ground_truth.stats(http)

    async def devices(self, pool: str) -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=self.emulator, timeout=5, verify=False) as http:
            return await ground_truth.labelled_devices(http, pool, api_key=self.api_key)


# Quick intervals for a cluster test. The startup timeout is also each create's whole
# budget (schedule-to-close): a create in flight on a killed worker gives up after
# it, instead of waiting out its 30 s start-to-close timeout, and the pool re-plans.
QUICK_INTERVALS = {
    "resyncSeconds": 1,
    "healthSeconds": 2,
    "offlineAfterSeconds": 30,
    "startupTimeoutSeconds": 8,
    "idleGraceSeconds": 0,
}


async def until(check: Callable[[], Awaitable[Any]], *, timeout: float, what: str) -> Any:
    """`eventually` twice a second (a poll asks every pool and the emulator), trying again
    when a query or a worker's endpoint fails meanwhile (a dead worker's sticky queue
    expiring, a worker still starting)."""
    retry_on = (httpx.HTTPError, OSError, DevicePoolError)
    return await eventually(check, timeout=timeout, what=what, every=0.5, retry_on=retry_on)


async def worker_ready(port: int) -> bool:
    async with httpx.AsyncClient(timeout=2, verify=False) as http:  # plain HTTP (Cluster.stats)
        return (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200


@contextmanager
def running_cluster(
    tmp: Path,
    *,
    api_key: str,
    creates_per_minute: int,
    provision_seconds: float,
    intervals: Mapping[str, float],
    server: TemporalServer | None = None,
    namespace: str = "default",
) -> Iterator[Cluster]:
    """The emulator and the workers' config in `tmp`, on `server` (a server of its own if
    None) in `namespace`."""
    with ExitStack() as own:
        if server is None:
            server = own.enter_context(temporal_server(tmp))
        (emulator_port,) = free_ports(1)
        cluster = Cluster(tmp, server, namespace, emulator_port, api_key, base_env())
        emulator = [sys.executable, "-m", "devicepool.emulator", "--port", str(emulator_port)]
        emulator += ["--provision-seconds", str(provision_seconds)]
        emulator += ["--creates-per-minute", str(creates_per_minute)]
        emulator += ["--account", f"default={api_key}"]
        cluster.spawn("emulator", emulator, cluster.base_env)
        (tmp / "api-key").write_text(api_key + "\n")
        config = {
            "accounts": {
                "default": {
                    "baseUrl": cluster.emulator,
                    "apiKeyFile": "api-key",
                    "createsPerMinute": creates_per_minute,
                }
            },
            "proxyPools": {
                "proxyseller-us": {"host": "proxyseller-us.gateway.invalid", "port": 10000}
            },
            "intervals": dict(intervals),
        }
        (tmp / "worker.yaml").write_text(yaml.safe_dump(config))
        try:
            yield cluster
        finally:
            stop(cluster.processes)
