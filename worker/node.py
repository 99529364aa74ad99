"""A node worker: `devicepool worker --node NAME`, beside one BitBrowser desktop client.

It serves `node_task_queue(NAME)` with the node activities only, and with cloud-phone accounts
naming this node, their provider calls (`node_phone_task_queue`) and watches
(`node_watch_task_queue`): BitBrowser's all under ONE `PhonePacer` (the Local API's 1
cloud-phone request a second), GeeLark's at GeeLark under their key's one pacer and breaker
(docs/providers.md, 'One process serves a GeeLark account'). Every `--node-heartbeat-seconds` it beats at the node registry. Flags, config and
why: docs/browserpools.md, 'Running a node worker'."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Protocol

import httpx
import yaml
from pydantic import SecretStr
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.converter import PayloadCodec
from temporalio.worker import Worker

from devicepool.activities.devices import DeviceActivities
from devicepool.activities.errors import ProviderError
from devicepool.activities.node_browsers import NodeBrowserActivities
from devicepool.activities.node_models import DEFAULT_NODE_HEARTBEAT_SECONDS, NodeBeat
from devicepool.activities.providers.bitbrowser import (
    DEFAULT_BASE_URL,
    BrowserProfiles,
    LocalApi,
    PhonePacer,
)
from devicepool.activities.providers.bitbrowser.profile_provider import BitBrowserProfiles
from devicepool.activities.secrets import Scrubber
from devicepool.activities.settings import AccountSettings, PoolSettings, ProxyPoolSettings
from devicepool.api.labels import check_node_name, parse_label
from devicepool.api.names import (
    NODE_REGISTRY_WORKFLOW_ID,
    SIGNAL_NODE_BEAT,
    TASK_QUEUE,
    WORKFLOW_NODE_REGISTRY,
    node_phone_task_queue,
    node_task_queue,
    node_watch_task_queue,
)
from devicepool.codec import EncryptionCodec, key_files_from_env
from devicepool.worker.build import WATCH_SHUTDOWN_GRACE, new_worker, run_workers, stop_workers
from devicepool.worker.config import ConfigError, WorkerConfig, build_config, load_config
from devicepool.worker.config_file import DEFAULT_MAX_CONCURRENT_WATCHES
from devicepool.worker.config_values import check_url
from devicepool.worker.main import install_signal_handlers
from devicepool.workflows.nodes.state import NodeRegistryInput

__all__ = [
    "NodeOptions",
    "api_health",
    "beat_forever",
    "load_node_options",
    "node_activities",
    "node_main_async",
    "node_phone_activities",
    "node_workers",
    "run_node_worker",
    "send_beat",
]

log = logging.getLogger("devicepool.worker.node")

GRACEFUL_SHUTDOWN = timedelta(seconds=10)
# How long a beat waits for the Local API's `/health` before it says the API does not answer.
API_HEALTH_TIMEOUT = 5.0


@dataclass(frozen=True)
class NodeOptions:
    """What a node worker runs with: checked flags, the key read, the proxy pools loaded."""

    node: str
    labels: dict[str, str] = field(default_factory=dict)
    bitbrowser_url: str = DEFAULT_BASE_URL
    api_key: SecretStr | None = field(default=None, repr=False)
    proxy_pools: dict[str, ProxyPoolSettings] = field(default_factory=dict)
    heartbeat_seconds: float = DEFAULT_NODE_HEARTBEAT_SECONDS
    # The BitBrowser account the desktop client is logged into, if known (shown in the registry).
    account: str = ""
    # The config file's payload codec (its `encryption`); None: the environment's.
    codec: PayloadCodec | None = field(default=None, repr=False, compare=False)
    # The cloud-phone accounts it serves (`node: <this node>` in the config), each
    # over this node's Local API: `base_url` and `api_key` are the flags'.
    accounts: dict[str, AccountSettings] = field(default_factory=dict, repr=False)
    # Whether a BitBrowser desktop client is here for BrowserPools (`NodeBeat.browsers`):
    # False for a node given no `--bitbrowser-url` that serves GeeLark accounts only.
    browsers: bool = True

    @property
    def history_encrypted(self) -> bool:
        """Whether this node's client encrypts payloads (its config's keys, else the
        environment's, as `node_main_async` connects)."""
        if self.codec is not None:
            return isinstance(self.codec, EncryptionCodec)
        return bool(key_files_from_env(os.environ))

    def beat(self) -> NodeBeat:
        return NodeBeat(
            node=self.node,
            labels=self.labels,
            account=self.account,
            interval_seconds=self.heartbeat_seconds,
            # Names only: `apply` checks a BrowserPool's proxy.poolRef against them.
            proxy_pools=sorted(self.proxy_pools),
            browsers=self.browsers,
        )


def load_node_options(
    *,
    node: str,
    labels: list[str],
    bitbrowser_url: str | None = None,
    key_file: Path | None = None,
    config: Path | None = None,
    heartbeat_seconds: float = DEFAULT_NODE_HEARTBEAT_SECONDS,
    account: str = "",
    env: Mapping[str, str] | None = None,
) -> NodeOptions:
    """Check the flags and read the files (raises `ConfigError`, one line naming the flag).
    `bitbrowser_url` None: not given (the desktop client's default, if there is one)."""
    try:
        check_node_name(node)
    except ValueError as err:
        raise ConfigError(f"--node: {err}") from None
    parsed: dict[str, str] = {}
    for text in labels:
        try:
            key, value = parse_label(text)
        except ValueError as err:
            raise ConfigError(f"--node-label: {err}") from None
        parsed[key] = value
    url = DEFAULT_BASE_URL if bitbrowser_url is None else bitbrowser_url
    check_url(url, "--bitbrowser-url")
    if not heartbeat_seconds > 0:
        raise ConfigError(f"--node-heartbeat-seconds: must be > 0, got {heartbeat_seconds:g}")
    api_key: SecretStr | None = None
    if key_file is not None:
        try:
            api_key = SecretStr(key_file.read_text(encoding="utf-8").strip())
        except OSError as err:
            raise ConfigError(
                f"--bitbrowser-key-file: cannot read {key_file}: {err.strerror or err}"
            ) from None
    options = NodeOptions(
        node=node,
        labels=parsed,
        bitbrowser_url=url.rstrip("/"),
        api_key=api_key,
        heartbeat_seconds=heartbeat_seconds,
        account=account,
    )
    if config is None:
        return options
    loaded = _node_config(config, node, env=env if env is not None else os.environ)
    # Its accounts are served here: a cloud-phone account over this node's Local API, with
    # this node's key; a GeeLark account at GeeLark, with its own (the config read it).
    here = {"node": "", "base_url": options.bitbrowser_url, "api_key": api_key or SecretStr("")}
    # Serving only GeeLark accounts, told of no Local API: no desktop client for BrowserPools
    # here (a node on the default URL without the flag, serving no GeeLark, still is one).
    geelark_only = bool(loaded.accounts) and all(
        a.api == "geelark" for a in loaded.accounts.values()
    )
    return dataclasses.replace(
        options,
        proxy_pools=loaded.proxy_pools,
        codec=loaded.codec(),
        accounts={
            name: a.model_copy(update=here) if a.api == "bitbrowser" else a
            for name, a in loaded.accounts.items()
        },
        browsers=not (geelark_only and bitbrowser_url is None and key_file is None),
    )


def _node_config(config: Path, node: str, *, env: Mapping[str, str]) -> WorkerConfig:
    """The file as node `node` reads it: its own accounts only (checked before any
    secret is read). Main workers and every node read the same file: an account of another
    node, or without `node` (main workers serve it), is passed by, its key never read."""
    try:
        data = yaml.safe_load(config.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("accounts"), dict):
        return load_config(config, env=env)  # says what is wrong, or there are no accounts
    own: dict[str, object] = {}
    for name, account in data["accounts"].items():
        served_by = account.get("node") if isinstance(account, dict) else None
        if served_by == node:
            own[name] = account
        else:
            by = f"node {served_by}" if served_by is not None else "main workers"
            log.info("node %s: account %s is served by %s, not here", node, name, by)
    return build_config(
        {**data, "accounts": own},
        source=str(config),
        base_dir=config.parent,
        env=env,
        serving_node=node,
    )


def node_activities(
    options: NodeOptions, *, transport: httpx.AsyncBaseTransport | None = None
) -> NodeBrowserActivities:
    """The node's activities over its Local API (one client, as long as the worker lives)."""
    api = LocalApi(
        base_url=options.bitbrowser_url,
        api_key=options.api_key,
        transport=transport,
        scrubber=Scrubber.of(proxy_pools=options.proxy_pools.values()),
    )
    return NodeBrowserActivities(
        BitBrowserProfiles(BrowserProfiles(api)),
        node=options.node,
        proxy_pools=options.proxy_pools,
        history_encrypted=options.history_encrypted,
    )


def node_phone_activities(
    options: NodeOptions, *, transport: httpx.AsyncBaseTransport | None = None
) -> DeviceActivities | None:
    """The provider activities of the cloud-phone accounts this node serves (None: none): the
    BitBrowser ones under ONE pacer (every call reaches this node's Local API), each GeeLark
    one under its own key's (in this one process: the account's).
    """
    if not options.accounts:
        return None
    # The Local API's budget; a GeeLark account keeps its own pacer and breaker (per key).
    local = [a.phone_interval_seconds for a in options.accounts.values() if a.api == "bitbrowser"]
    interval = max(local, default=AccountSettings.model_fields["phone_interval_seconds"].default)
    return DeviceActivities(
        accounts=options.accounts,
        proxy_pools=options.proxy_pools,
        settings=PoolSettings(history_encrypted=options.history_encrypted),
        transport=transport,
        phone_pacer=PhonePacer(interval=interval),
    )


def node_workers(
    client: Client, activities: NodeBrowserActivities, phones: DeviceActivities | None = None
) -> list[Worker]:
    """The workers of `node_task_queue(node)` (the BrowserPool activities, no workflows), then
    (with cloud-phone accounts) of their short calls and of their long watches (why queues of
    their own: `api.names`).
    """
    short = [(node_task_queue(activities.node), activities.activities())]
    if phones is not None:
        short.append((node_phone_task_queue(activities.node), phones.node_queue_activities()))
    workers = [
        new_worker(
            client,
            task_queue=queue,
            activities=served,
            graceful_shutdown_timeout=GRACEFUL_SHUTDOWN,
            disable_eager_activity_execution=True,
        )
        for queue, served in short
    ]
    if phones is not None:
        workers.append(
            new_worker(
                client,
                task_queue=node_watch_task_queue(activities.node),
                activities=phones.watch_queue_activities(),
                max_concurrent_activities=DEFAULT_MAX_CONCURRENT_WATCHES,
                graceful_shutdown_timeout=WATCH_SHUTDOWN_GRACE,
            )
        )
    return workers


async def send_beat(client: Client, beat: NodeBeat) -> None:
    """One `node_beat`, starting the registry if it does not run (idempotent)."""
    await client.start_workflow(
        WORKFLOW_NODE_REGISTRY,
        NodeRegistryInput(),
        id=NODE_REGISTRY_WORKFLOW_ID,
        task_queue=TASK_QUEUE,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        start_signal=SIGNAL_NODE_BEAT,
        start_signal_args=[beat],
        static_summary="node workers and their last beats",
    )


class _Answers(Protocol):
    """What a beat asks of the node's API (a `LocalApi`, a `ProfileProvider`)."""

    async def health(self) -> None: ...


async def api_health(api: _Answers, *, timeout: float = API_HEALTH_TIMEOUT) -> tuple[bool, str]:
    """Whether the desktop client's Local API answers `/health` with this node's key, and
    if not, why (`unauthenticated (HTTP 403): ...`; the client scrubs its key from errors)."""
    try:
        await asyncio.wait_for(api.health(), timeout)
    except TimeoutError:
        return False, f"timeout: the Local API did not answer /health in {timeout:g}s"
    except ProviderError as err:
        return False, str(err)[:300]
    return True, ""


async def beat_forever(
    client: Client,
    beat: NodeBeat,
    *,
    stop: asyncio.Event,
    api: _Answers | None = None,
    first: asyncio.Event | None = None,
) -> None:
    """A beat every `beat.interval_seconds` until `stop` is set; a failed beat is logged.

    With `api`, each beat carries the Local API's health (`api_health`), so a pool on this
    node can say why it cannot use it (a wrong key, the desktop client closed); a change of
    health is logged once. `first` is set once the first beat was sent (or failed).
    """
    failing = False
    healthy: bool | None = None
    while not stop.is_set():
        if api is not None:
            ok, error = await api_health(api)
            if ok != healthy:
                if ok:
                    log.info("node %s: the Local API answers", beat.node)
                else:
                    log.warning("node %s: the Local API does not serve: %s", beat.node, error)
            healthy = ok
            beat = beat.model_copy(update={"api_healthy": ok, "api_error": error})
        try:
            await send_beat(client, beat)
            if failing:
                log.info("node %s: beats reach the registry again", beat.node)
            failing = False
        except Exception as err:  # Temporal away: keep beating, say so once
            if not failing:
                log.warning("node %s: beat failed: %s", beat.node, str(err).splitlines()[0])
            failing = True
        if first is not None:
            first.set()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=beat.interval_seconds)


async def run_node_worker(
    options: NodeOptions,
    client: Client,
    *,
    shutdown_event: asyncio.Event,
    transport: httpx.AsyncBaseTransport | None = None,
) -> None:
    """Serve the node's queue and beat until `shutdown_event` (or the worker fails)."""
    activities = node_activities(options, transport=transport)
    phones = node_phone_activities(options, transport=transport)
    # Without a desktop client (GeeLark only) there is no Local API to ask or to warn about.
    local_api = activities.provider if options.browsers else None
    try:
        if local_api is not None:
            await local_api.health()
    except ProviderError as err:
        # The desktop client may start later: the activities fail (retryably) until it does.
        log.warning("node %s: the Local API does not answer yet: %s", options.node, err)
    workers = node_workers(client, activities, phones)
    serving = run_workers(workers)
    beaten = asyncio.Event()
    beating = asyncio.create_task(
        beat_forever(client, options.beat(), stop=shutdown_event, api=local_api, first=beaten)
    )
    stop = asyncio.create_task(shutdown_event.wait())
    try:
        # "serving" once the registry has its first beat: a pool applied right after (`devicepool
        # dev --apply`) finds this node alive in its first pass, and spreads over it too.
        first = asyncio.create_task(beaten.wait())
        await asyncio.wait({first, stop, *serving}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        first.cancel()
        labels = ",".join(f"{k}={v}" for k, v in sorted(options.labels.items())) or "(none)"
        log.info(
            "node worker %s serving %s, labels %s, Local API %s, proxy pools %s, "
            "cloud-phone accounts %s",
            options.node,
            ",".join(w.task_queue for w in workers),
            labels,
            options.bitbrowser_url if options.browsers else "(none: no BrowserPools here)",
            ",".join(sorted(options.proxy_pools)) or "(none)",
            ",".join(sorted(options.accounts)) or "(none)",
        )
        await asyncio.wait({*serving, stop}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        shutdown_event.set()
        await beating
        await stop_workers(workers, serving)
        stop.cancel()
        await activities.aclose()
        if phones is not None:
            await phones.aclose()
        log.info("node worker %s stopped", options.node)
    for task in serving:
        failure = task.exception() if task.done() and not task.cancelled() else None
        if failure is not None:
            raise failure


async def node_main_async(options: NodeOptions) -> None:
    """`devicepool worker --node NAME`: connect (the SDK's env config), serve until a signal."""
    from devicepool.connect import connect

    shutdown_event = asyncio.Event()
    install_signal_handlers(shutdown_event)
    client = await connect(
        identity=f"devicepool-node-{options.node}@{socket.gethostname()}:{os.getpid()}",
        codec=options.codec,
    )
    await run_node_worker(options, client, shutdown_event=shutdown_event)
