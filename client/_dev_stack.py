"""`DevStack`: the three processes of `devicepool dev`, started in order, watched, stopped in order.

Start: the data dir's lock, the Temporal dev server with the emulators (the provider's, with
`--browser-nodes` the BitBrowser nodes', with `--geelark` the GeeLark one), then (once all answer)
the worker and node workers, then `--apply` (on a new data dir only: a restart must not undo
the user's changes), then the banner. Stop: the workers first (they finish in-flight
activities), then the emulators, the server, the lock."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from temporalio.converter import PayloadCodec

from devicepool.activities.node_models import DEFAULT_NODE_HEARTBEAT_SECONDS
from devicepool.api.kinds import kind_named
from devicepool.api.names import LABEL_NODE
from devicepool.client._dev_banner import (
    banner,
    manifests_line,
    still_stopping_line,
    stopping_line,
)
from devicepool.client._dev_commands import (
    bitbrowser_command,
    codec_command,
    codec_url,
    emulator_command,
    geelark_command,
    python_m,
    server_command,
)
from devicepool.client._dev_config import (
    BITBROWSER_ACCOUNT,
    BITBROWSER_PHONES_NODE,
    DEV_HOST,
    DEV_NAMESPACE,
    NODE_WORKER_SUFFIX,
    DevOptions,
    browser_node_names,
    check_encryption_installed,
    encryption_on,
    ensure_dev_key,
    geelark_address,
    geelark_port,
    is_node_worker,
    node_config_file,
    node_ports_file,
    node_worker_name,
    save_geelark_port,
    save_node_ports,
    saved_node_ports,
    server_env,
    worker_env,
    write_node_config,
    write_worker_config,
)
from devicepool.client._dev_processes import (
    Child,
    DataDirLock,
    find_temporal,
    killpg,
    log_since,
    log_size,
    spawn,
    stop_child,
)
from devicepool.client._results import applied_verb
from devicepool.client.errors import DevicePoolError, TemporalUnreachable
from devicepool.client.setup import register_search_attributes

READY_TIMEOUT = 90.0
# A child not gone after this long (and as often again) is named with why the stack waits.
SLOW_STOP_NOTICE = 5.0
# What the BitBrowser emulator prints once every node listens: `node-1 http://127.0.0.1:PORT`.
_NODE_LINE = re.compile(r"^(node-\d+) (http://\S+)$", re.MULTILINE)


@dataclass
class DevStack:
    options: DevOptions
    out: Callable[[str], None] = field(default=lambda line: print(line, flush=True))
    children: list[Child] = field(default_factory=list)
    lock: DataDirLock | None = None
    # `--browser-nodes`: each node's address, as the BitBrowser emulator printed it.
    browser_nodes: dict[str, str] = field(default_factory=dict)
    # `--geelark`: the GeeLark emulator's address ("" without).
    geelark_url: str = ""

    @property
    def data_dir(self) -> Path:
        return self.options.data_dir

    def _log(self, name: str) -> Path:
        return self.data_dir / "logs" / f"{name}.log"

    # ------------------------------------------------------------ start

    async def start(self, pools: Sequence[Any]) -> None:
        """Start the processes; apply `pools` if the data dir is new; print the banner."""
        o = self.options
        check_encryption_installed(o)  # before the lock, a key or any process
        # First: a data dir another stack runs on must not be touched at all.
        self.lock = self.lock or DataDirLock(self.data_dir)
        geelark = geelark_port(o) if o.geelark else None
        self.lock.acquire(
            f"pid {os.getpid()}, Temporal {o.address}, Web UI port {o.ui_port}, "
            f"emulator port {o.emulator_port}, metrics port {o.metrics_port}"
            + (f", GeeLark port {geelark}" if geelark else "")
        )
        self._check_ports()
        # Looked at before the server creates it: without a Temporal database
        # the data dir holds no pools, so there is nothing the user changed.
        new_data_dir = not (self.data_dir / "temporal.db").exists()
        (self.data_dir / "logs").mkdir(parents=True, exist_ok=True)
        encrypted = encryption_on(o)
        key_files = [str(ensure_dev_key(o).relative_to(self.data_dir))] if encrypted else []
        accounts, proxy_pools = write_worker_config(
            o,
            pools,
            key_files=key_files,
            # Its cloud phones are node-1's worker's to serve (no URL needed here).
            bitbrowser_node=BITBROWSER_PHONES_NODE if o.browser_nodes else None,
            geelark_url=geelark_address(geelark) if geelark else None,
        )
        await self._start_server()
        await self._spawn("emulator", emulator_command(o, accounts))
        waits = [self._wait_temporal(), self._wait_emulator()]
        if geelark:
            self.geelark_url = geelark_address(geelark)
            await self._spawn("geelark", geelark_command(o, geelark))
            waits.append(
                self._wait_http(
                    "geelark", f"{self.geelark_url}/_emulator/stats", timeout=READY_TIMEOUT
                )
            )
        if o.browser_nodes:
            log_from = log_size(self._log("bitbrowser"))
            await self._spawn("bitbrowser", bitbrowser_command(o, self._node_ports()))
            waits.append(self._wait_bitbrowser(log_from))
        if encrypted:
            await self._spawn("codec-server", codec_command(o))
            waits.append(
                self._wait_http("codec-server", f"{codec_url(o)}/healthz", timeout=READY_TIMEOUT)
            )
        self.out(f"starting Temporal on {o.address} and the emulator on port {o.emulator_port} ...")
        await asyncio.gather(*waits)
        if self.browser_nodes:
            save_node_ports(o, self.browser_nodes)
        if geelark:
            save_geelark_port(o, geelark)

        await self._start_worker()
        if o.browser_nodes:  # a node worker per emulator node, labelled node=<name>
            write_node_config(o, proxy_pools, key_files=key_files)
            for node in self.browser_nodes:
                await self._start_node_worker(node)
        if pools and new_data_dir:
            await self.apply(pools)
        manifests = manifests_line(o, pools, new_data_dir)
        self.out(
            banner(
                o,
                accounts,
                proxy_pools,
                self.browser_nodes,
                manifests=manifests,
                geelark_url=self.geelark_url,
            )
        )

    async def _start_server(self) -> None:
        # Without the shell's OTEL_* (meant for the worker): the server refuses some of them.
        command = server_command(find_temporal(), self.options)
        await self._spawn("temporal", command, env=server_env())

    async def _start_worker(self) -> None:
        o = self.options
        command = python_m(
            "devicepool.client",
            "worker",
            "--promote",
            config=self.data_dir / "worker.yaml",
            metrics_port=o.metrics_port,
        )
        await self._spawn("worker", command, env=worker_env(o))
        await self._wait_http(
            "worker", f"http://{DEV_HOST}:{o.metrics_port}/readyz", timeout=READY_TIMEOUT
        )

    async def _start_node_worker(self, node: str) -> None:
        name = node_worker_name(node)
        log_from = log_size(self._log(name))
        await self._spawn(name, self.node_worker_command(node), env=worker_env(self.options))
        await self._wait_log(name, f"node worker {node} serving", log_from)

    def node_worker_command(self, node: str) -> list[str]:
        """`devicepool worker --node NAME` on its emulator node, with the dev proxy pools."""
        return python_m(
            "devicepool.client",
            "worker",
            node=node,
            node_label=f"{LABEL_NODE}={node}",
            bitbrowser_url=self.browser_nodes[node],
            node_account=BITBROWSER_ACCOUNT,
            node_heartbeat_seconds=f"{node_beat_seconds(self.options):g}",
            config=node_config_file(self.options),
        )

    async def restart(self, old: Child) -> None:
        """A dead worker, node worker or server again; the server on the same database and
        ports (the workers reconnect by themselves)."""
        await stop_child(old)
        old.log.close()
        self.children.remove(old)
        if old.name == "temporal":
            await self._start_server()
            await self._wait_temporal()
            return
        await asyncio.sleep(0.5)
        if is_node_worker(old.name):
            await self._start_node_worker(old.name.removesuffix(NODE_WORKER_SUFFIX))
        else:
            await self._start_worker()

    def _node_ports(self) -> dict[str, int]:
        """The BitBrowser nodes' ports of the previous run, those still free; a taken one is
        said, and its node gets a free port."""
        o = self.options
        ports: dict[str, int] = {}
        wanted = browser_node_names(o)
        # Free now, but this run's own servers take them (the worker's metrics after this).
        flagged = {o.port, o.ui_port, o.emulator_port, o.metrics_port, o.codec_port}
        if o.geelark:
            flagged.add(geelark_port(o))
        for name, port in saved_node_ports(o).items():
            if name not in wanted:
                continue
            if port not in flagged and port not in ports.values() and port_is_free(port):
                ports[name] = port
            else:
                self.out(
                    f"{name}'s port {port} (kept in {node_ports_file(self.options).name}) is "
                    "taken: it gets a free one"
                )
        return ports

    def _check_ports(self) -> None:
        o = self.options
        flagged = [
            ("--port", o.port),
            ("--ui-port", o.ui_port),
            ("--emulator-port", o.emulator_port),
            ("--metrics-port", o.metrics_port),
            *([("--codec-port", o.codec_port)] if encryption_on(o) else []),
            *([("--geelark-port", geelark_port(o))] if o.geelark else []),
        ]
        first: dict[int, str] = {}
        for flag, port in flagged:
            if port in first:  # free now, but only one of the two can listen there
                raise DevicePoolError(
                    f"port {port} is both {first[port]} and {flag}: give each its own port"
                )
            first[port] = flag
        for flag, port in flagged:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind((DEV_HOST, port))
                except OSError:
                    other = port + 10000 if port < 55536 else port - 10000
                    raise DevicePoolError(
                        f"port {port} ({flag}) is already in use — another `devicepool dev`? "
                        f"choose free ports with --port/--ui-port/--emulator-port/--metrics-port "
                        f'(through make: make demo ARGS="{flag} {other}")'
                    ) from None

    async def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        self.children.append(await spawn(name, args, log_path=self._log(name), env=env))

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
            except (TemporalUnreachable, Exception) as err:  # not ready yet: any answer will do
                last = str(err).splitlines()[0] if str(err) else type(err).__name__
                await asyncio.sleep(0.25)
                continue
            # The server registers its `--search-attribute`s only when it creates the
            # database: a data dir of an older build lacks a newer one's (the worker would
            # refuse to start).
            await register_search_attributes(client)
            return
        raise DevicePoolError(
            f"Temporal did not become ready in {READY_TIMEOUT:g}s ({last}); "
            f"see {self._log('temporal')}"
        )

    async def _wait_emulator(self) -> None:
        url = f"http://{DEV_HOST}:{self.options.emulator_port}/_emulator/stats"
        await self._wait_http("emulator", url, timeout=READY_TIMEOUT)

    async def _wait_bitbrowser(self, log_from: int) -> None:
        """Each node's address from the lines it prints once all listen, then its stats."""
        log = self._log("bitbrowser")
        wanted = browser_node_names(self.options)
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            self._check_alive()
            found = dict(_NODE_LINE.findall(log_since(log, log_from)))
            if all(name in found for name in wanted):
                self.browser_nodes = {name: found[name] for name in wanted}
                for url in self.browser_nodes.values():
                    await self._wait_http("bitbrowser", f"{url}/_emulator/stats", timeout=10)
                return
            await asyncio.sleep(0.2)
        raise DevicePoolError(
            f"the BitBrowser emulator did not become ready in {READY_TIMEOUT:g}s; see {log}"
        )

    async def _wait_log(self, name: str, line: str, log_from: int) -> None:
        """Until the child `name` logs `line` (after `log_from`)."""
        log = self._log(name)
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            self._check_alive()
            if line in log_since(log, log_from):
                return
            await asyncio.sleep(0.2)
        raise DevicePoolError(f"the {name} did not become ready in {READY_TIMEOUT:g}s; see {log}")

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
            f"the {name} did not become ready in {timeout:g}s; see {self._log(name)}"
        )

    def _check_alive(self) -> None:
        for child in self.children:
            if child.process.returncode is not None:
                raise DevicePoolError(child.exit_reason())

    # ------------------------------------------------------------ run

    async def apply(self, pools: Sequence[Any]) -> None:
        """Apply the `--apply` manifests: DevicePools and BrowserPools, in their order."""
        from devicepool.client.pool_client import PoolClient
        from devicepool.connect import connect

        client = PoolClient(
            await connect(address=self.options.address, env={}, codec=self._codec())
        )
        for pool in pools:
            try:
                result = await client.apply(pool)  # either kind: the pool says which
            except DevicePoolError as err:
                self.out(f"error: {err}")
                continue
            self.out(
                f"{kind_named(pool.kind).resource}/{pool.name} {applied_verb(result)} "
                f"(generation {result.generation}, replicas {result.replicas})"
            )

    def _codec(self) -> PayloadCodec | None:
        """The stack's own codec (`--encrypt`), whatever the user's environment says."""
        if not encryption_on(self.options):
            return None
        from devicepool.codec import EncryptionCodec, KeyRing

        return EncryptionCodec(KeyRing.from_files([ensure_dev_key(self.options)]))

    async def wait_any_exit(self) -> Child:
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
        order = {
            "worker": 0,
            "emulator": 1,
            "bitbrowser": 1,
            "geelark": 1,
            "codec-server": 2,
            "temporal": 3,
        }

        def rank(child: Child) -> int:
            # Node workers with the worker: before the emulator nodes they call.
            return 0 if is_node_worker(child.name) else order.get(child.name, 9)

        for child in sorted(self.children, key=rank):
            if child.process.returncode is None:
                self.out(await stopping_line(self.options, child.name))
            stopping = asyncio.create_task(stop_child(child))
            # Slow to go (a worker finishing its activities): say so while waiting, and how
            # it ends.
            while not (await asyncio.wait({stopping}, timeout=SLOW_STOP_NOTICE))[0]:
                self.out(await still_stopping_line(self.options, child.name))
            await stopping
            child.log.close()
        self.children.clear()
        if self.lock is not None:
            self.lock.release()

    def kill_all(self) -> None:
        for child in self.children:
            killpg(child.process.pid, signal.SIGKILL)


def port_is_free(port: int) -> bool:
    """Whether a server could listen on `port` of the dev host now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((DEV_HOST, port))
        except OSError:
            return False
    return True


def node_beat_seconds(options: DevOptions) -> float:
    """A node worker's beat: at most a third of `--node-lost-after-seconds`, so one late
    beat does not lose the node (the default beat, 10 s, would under a short limit)."""
    return min(DEFAULT_NODE_HEARTBEAT_SECONDS, options.node_lost_after_seconds / 3)
