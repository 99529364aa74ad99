"""What `devicepool dev` prints: the "is up" banner, and what Ctrl-C says while each child stops."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

import httpx

from devicepool.api.names import LABEL_NODE
from devicepool.client import _dev_processes
from devicepool.client._dev_commands import (
    cli_command,
    codec_url,
    in_flight_activities,
    pools_view,
    try_line,
)
from devicepool.client._dev_config import (
    BITBROWSER_ACCOUNT,
    DEFAULT_API_KEY,
    DEV_HOST,
    DEV_NAMESPACE,
    GEELARK_ACCOUNT,
    KEY_ID,
    DevOptions,
    bitbrowser_state_file,
    dev_key_file,
    encryption_on,
    geelark_state_file,
    node_worker_name,
)
from devicepool.worker.config import DEFAULT_GRACEFUL_SHUTDOWN_SECONDS

# What Ctrl-C says while each child stops (the worker's line adds what it waits for).
STOPPING = {
    "worker": "the worker",
    "emulator": "the emulator",
    "bitbrowser": "the BitBrowser emulator",
    "geelark": "the GeeLark emulator",
    "codec-server": "the codec server",
    "temporal": "Temporal",
}


def manifests_line(options: DevOptions, pools: Sequence[Any], new_data_dir: bool) -> str:
    """The banner's word on `--apply`: applied, or skipped on a data dir that existed."""
    if not pools:
        return ""
    source = options.apply or "the manifests"
    if new_data_dir:
        said = f"{source} applied (a new data dir)"
    else:
        said = (
            f"{source} not applied: {options.data_dir} already existed, so its pools keep "
            "their changes (apply it by hand to reset them)"
        )
    return f"  Manifests:        {said}\n"


def banner(
    o: DevOptions,
    accounts: Sequence[str],
    proxy_pools: Sequence[str],
    browser_nodes: dict[str, str],
    *,
    manifests: str = "",
    geelark_url: str = "",
) -> str:
    """`devicepool dev is up`: where each part of the stack answers."""
    logs = o.data_dir / "logs"
    env_hint = (
        "" if o.port == 7233 else f"\n  Point the CLI at it:  export TEMPORAL_ADDRESS={o.address}"
    )
    workflows = f"http://{DEV_HOST}:{o.ui_port}/namespaces/{DEV_NAMESPACE}/workflows"
    return (
        "devicepool dev is up\n"
        f"  Temporal Web UI:  {workflows}\n"
        f"  Pools only:       {pools_view(workflows)}\n"
        f"  Temporal:         {o.address} (the CLI's TEMPORAL_ADDRESS)"
        f"{env_hint}\n"
        f"  Emulator:         http://{DEV_HOST}:{o.emulator_port} "
        f"(accounts: {', '.join(accounts)}; key {DEFAULT_API_KEY})\n"
        f"{browser_nodes_lines(o, browser_nodes)}"
        f"{geelark_line(o, geelark_url)}"
        f"  Worker metrics:   http://{DEV_HOST}:{o.metrics_port}/metrics\n"
        f"  Proxy pools:      {', '.join(proxy_pools)} (placeholder gateways)\n"
        f"{codec_lines(o) if encryption_on(o) else ''}"
        f"  Data and logs:    {o.data_dir}/ (temporal.db, emulator.sqlite; "
        f"{logs}/temporal.log, emulator.log, worker.log)\n"
        f"{manifests}"
        f"{try_line(cli_command(), dev_key_file(o) if encryption_on(o) else None)}"
        "Ctrl-C stops everything; running again with the same --data-dir resumes the pools."
    )


def browser_nodes_lines(options: DevOptions, browser_nodes: dict[str, str]) -> str:
    """The banner's BitBrowser nodes (`--browser-nodes`), one per line; none without."""
    if not browser_nodes:
        return ""
    indent = " " * len("  BitBrowser nodes: ")
    nodes = [f"{name} {url}" for name, url in browser_nodes.items()]
    return (
        f"  BitBrowser nodes: {nodes[0]}\n"
        + "".join(f"{indent}{line}\n" for line in nodes[1:])
        + f"{indent}(account {BITBROWSER_ACCOUNT} in {bitbrowser_state_file(options).name}, "
        "log bitbrowser.log)\n"
        + f"  Node workers:     {', '.join(browser_nodes)} (labelled {LABEL_NODE}=<name>; "
        f"logs {node_worker_name('<name>')}.log)\n"
    )


def geelark_line(options: DevOptions, url: str) -> str:
    """The banner's GeeLark emulator (`--geelark`): where it answers, its account, its ground
    truth, its state and log; none without. (Its key, in secrets/geelark.key, is never said.)"""
    if not url:
        return ""
    return (
        f"  GeeLark emulator: {url} (account {GEELARK_ACCOUNT}; stats {url}/_emulator/stats; "
        f"team in {geelark_state_file(options).name}, log geelark.log)\n"
    )


def codec_lines(options: DevOptions) -> str:
    return (
        f"  Codec server:     {codec_url(options)} (history encrypted with key {KEY_ID!r}; "
        f"the Web UI decodes through it)\n"
        f"  For the CLI:      export DEVICEPOOL_ENCRYPTION_KEY_FILES="
        f"{shlex.quote(str(dev_key_file(options).absolute()))}\n"
    )


async def stopping_line(options: DevOptions, name: str) -> str:
    """`stopping the worker (waiting for 3 activities in flight, at most 20 s) ...`."""
    what = STOPPING.get(name, f"the {name}")
    busy = await _in_flight(options) if name == "worker" else 0
    if not busy:
        return f"stopping {what} ..."
    return (
        f"stopping {what} (waiting for {_activities(busy)} in flight, "
        f"at most {DEFAULT_GRACEFUL_SHUTDOWN_SECONDS:g} s) ..."
    )


async def still_stopping_line(options: DevOptions, name: str) -> str:
    """What Ctrl-C says while a child is slow to exit: what it waits for, when it ends."""
    what = STOPPING.get(name, f"the {name}")
    busy = await _in_flight(options) if name == "worker" else 0
    why = f": {_activities(busy)} in flight" if busy else " to exit"
    return (
        f"  still waiting for {what}{why} (killed at {_dev_processes.STOP_TIMEOUT:g} s; "
        "Ctrl-C again kills it now)"
    )


async def _in_flight(options: DevOptions) -> int:
    """The dev worker's activities in flight, read from its `/metrics`; 0 when it does not say."""
    url = f"http://{DEV_HOST}:{options.metrics_port}/metrics"
    try:
        async with httpx.AsyncClient(timeout=1.0) as http:
            return in_flight_activities((await http.get(url)).text)
    except httpx.HTTPError:
        return 0  # not answering: nothing to say about it


def _activities(count: int) -> str:
    return f"{count} activity" if count == 1 else f"{count} activities"
