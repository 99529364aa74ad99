"""Every name that more than one layer relies on, in one place: task queues, workflow ids,
search attribute names, label keys, message names.

Changing one breaks users (the stock `temporal` CLI, the Web UI's saved searches, running
workflows)."""

from __future__ import annotations

API_GROUP = "mobile.example.com"
API_VERSION_V1ALPHA1 = f"{API_GROUP}/v1alpha1"
# The version pools are stored in (and `get -o yaml` shows); v1alpha1 converts to it.
API_VERSION_V1BETA1 = f"{API_GROUP}/v1beta1"
API_VERSION_STORED = API_VERSION_V1BETA1
KIND_DEVICE_POOL = "DevicePool"
# BitBrowser desktop browser profiles on tagged node workers (DESIGN.md, "BrowserPool").
KIND_BROWSER_POOL = "BrowserPool"
# Each kind's row (its CLI words, models, workflow type and id prefix): `api.kinds`.


def after(prefix: str, name: str) -> str | None:
    """`name` without `prefix` (what an id or a queue was made of), or None without it."""
    return name[len(prefix) :] if name.startswith(prefix) else None


# Task queues
TASK_QUEUE = "devicepool"
ACCOUNT_TASK_QUEUE_PREFIX = "devicepool-account-"


def account_task_queue(account: str) -> str:
    """The task queue that carries one provider account's create calls."""
    return f"{ACCOUNT_TASK_QUEUE_PREFIX}{account}"


WATCH_TASK_QUEUE_SUFFIX = "-watch"


def watch_task_queue(task_queue: str = TASK_QUEUE) -> str:
    """The queue of the long `watch_devices` activities of pools that run on `task_queue`.

    Why a queue of its own: `worker.config.WorkerCapacity`.
    """
    return f"{task_queue}{WATCH_TASK_QUEUE_SUFFIX}"


# A node worker (`devicepool worker --node NAME`) serves the activities of the
# BitBrowser Local API on its desktop from a queue of its own.
NODE_TASK_QUEUE_PREFIX = "devicepool-node-"


def node_task_queue(node: str) -> str:
    """The task queue of the node worker `node` (`devicepool-node-node-1`)."""
    return f"{NODE_TASK_QUEUE_PREFIX}{node}"


# The node worker's queue for the short calls of the cloud-phone accounts it serves: they
# wait for its pacer (1 request a second) holding a slot each, so they have slots of their
# own, apart from the BrowserPool calls on `node_task_queue`. A prefix, not a suffix: no
# node's name can make another node's queue of it.
NODE_PHONE_TASK_QUEUE_PREFIX = "devicepool-phones-"


def node_phone_task_queue(node: str) -> str:
    """The cloud-phone queue of the node worker `node` (`devicepool-phones-node-1`)."""
    return f"{NODE_PHONE_TASK_QUEUE_PREFIX}{node}"


# The node worker's queue for the long cloud-phone watches (`watch_devices`), with slots
# sized for sleeping coroutines. A prefix as well: `watch_task_queue(node_task_queue(a))`
# was node `a-watch`'s BrowserPool queue.
NODE_WATCH_TASK_QUEUE_PREFIX = "devicepool-phone-watch-"


def node_watch_task_queue(node: str) -> str:
    """The cloud-phone watch queue of the node worker `node` (`devicepool-phone-watch-node-1`)."""
    return f"{NODE_WATCH_TASK_QUEUE_PREFIX}{node}"


# Workflow types and ids
WORKFLOW_DEVICE_POOL = "DevicePool"
WORKFLOW_PROVISION_BATCH = "ProvisionBatch"
WORKFLOW_ID_PREFIX = "devicepool/"


def pool_workflow_id(pool: str) -> str:
    return f"{WORKFLOW_ID_PREFIX}{pool}"


def pool_name_from_workflow_id(workflow_id: str) -> str | None:
    return after(WORKFLOW_ID_PREFIX, workflow_id)


# A BrowserPool is the workflow `browserpool/<name>`: a DevicePool and a BrowserPool
# may share a name (names are unique per kind), their workflow ids may not.
BROWSER_POOL_WORKFLOW_ID_PREFIX = "browserpool/"


WORKFLOW_BROWSER_POOL = "BrowserPool"


def browser_pool_workflow_id(pool: str) -> str:
    return f"{BROWSER_POOL_WORKFLOW_ID_PREFIX}{pool}"


def provision_workflow_id(pool: str, generation: int, batch: int) -> str:
    return f"{WORKFLOW_ID_PREFIX}{pool}/provision/{generation}-{batch}"


def create_idempotency_key(pool: str, generation: int, slot: int, incarnation: str = "") -> str:
    """Deterministic per (pool incarnation, generation, slot): a retry or replay reuses it.

    `incarnation` tells a pool apart from an earlier one of the same name (deleted
    and applied again), whose keys the provider may still remember.
    """
    prefix = f"devicepool:{pool}:{incarnation}:" if incarnation else f"devicepool:{pool}:"
    return f"{prefix}g{generation}:s{slot}"


# Messages (signals, updates, queries) of the DevicePool workflow
SIGNAL_SCALE = "scale"
# Signal `wake` (no payload): look again now — list the devices, and on a versioned
# worker move to the current build if a newer one was promoted (`devicepool upgrade`).
SIGNAL_WAKE = "wake"
UPDATE_APPLY = "apply"
UPDATE_SCALE = "scale_update"
QUERY_STATUS = "status"
QUERY_DEVICES = "devices"
QUERY_SPEC = "spec"
# what the pool's devices billed, by the hour (`devicepool cost`)
QUERY_COST = "cost"
# Per-device and remediation control (updates; `devicepool replace|protect|unprotect|pause|resume`)
UPDATE_REPLACE_DEVICE = "replace_device"
UPDATE_PROTECT_DEVICE = "protect_device"
UPDATE_UNPROTECT_DEVICE = "unprotect_device"
UPDATE_PAUSE_REMEDIATION = "pause_remediation"
UPDATE_RESUME_REMEDIATION = "resume_remediation"
# the pool's own recent events (workflows/reconciler/events.py), for `devicepool describe`
QUERY_EVENTS = "events"
# Leases, both kinds (`devicepool lease|renew|release|leases`; docs/leases.md)
UPDATE_LEASE = "lease"
UPDATE_LEASE_CLAIM = "lease_claim"
UPDATE_RENEW = "renew"
UPDATE_RELEASE = "release"
# a held lease's connect info (ADB, CDP), answered only through encrypted history
UPDATE_LEASE_CONNECT = "lease_connect"
# a deleted pool's leases end now (`devicepool delete --force`)
UPDATE_END_LEASES = "end_leases"
QUERY_LEASES = "leases"
QUERY_LEASE_TICKET = "lease_ticket"
# The same lease taken and given back by signals (the Python client's way: no update in
# flight, so any number of clients at once; its state read with `lease_ticket`)
SIGNAL_LEASE_ASK = "lease_ask"
SIGNAL_LEASE_GIVE_BACK = "lease_give_back"

# Provider labels
LABEL_POOL = "pool"
LABEL_MANAGED_BY = "managed-by"
MANAGED_BY = "devicepool"
# The label `devicepool dev --browser-nodes N` gives each of its node workers: node=<name>.
LABEL_NODE = "node"

# Search attributes (registered by `devicepool dev` and `devicepool setup`)
SA_PLATFORM = "DevicePoolPlatform"
SA_REGION = "DevicePoolRegion"
SA_DESIRED = "DevicePoolDesired"
SA_READY = "DevicePoolReady"
SA_PHASE = "DevicePoolPhase"
SA_ACCOUNT = "DevicePoolAccount"
# When the pool last wrote its memo row (`MEMO_POOL_ROW`): `get -w` lists only the pools
# whose row changed since its last refresh (`client._pool_reads.RowWatch`).
SA_ROW_AT = "DevicePoolRowAt"
# The memo key of a pool's row: what `get` and the worker's gauges read of it from one List
# call (`workflows.reconciler.row_memo`).
MEMO_POOL_ROW = "devicepoolRow"

# name -> Temporal search attribute type, as the `temporal` CLI spells it
SEARCH_ATTRIBUTES: dict[str, str] = {
    SA_PLATFORM: "Keyword",
    SA_REGION: "Keyword",
    SA_DESIRED: "Int",
    SA_READY: "Int",
    SA_PHASE: "Keyword",
    SA_ACCOUNT: "Keyword",
    SA_ROW_AT: "Datetime",
}
# The Web UI's pool columns (`devicepool dev`'s one line, docs/operations.md): every search
# attribute but the row's time, a stamp for `get -w` that no one reads in a list.
POOL_COLUMNS: tuple[str, ...] = tuple(name for name in SEARCH_ATTRIBUTES if name != SA_ROW_AT)

# Signal a provisioning child sends its parent pool when its batch is done.
SIGNAL_BATCH_DONE = "batch_done"
# pool → its batch: slots it no longer needs (dropped if they hold no permit yet)
SIGNAL_WITHDRAW_SLOTS = "withdraw_slots"
# ...and as soon as its creates are done (slot -> device), before waiting for boots.
SIGNAL_BATCH_CREATED = "batch_created"
# Label carrying the provisioning slot a device was created for (`slot_label`).
LABEL_SLOT = "devicepool-slot"
# The hash of the template a device was created from (`activities.models.template_hash`):
# a device whose hash is not the spec's has drifted (`spec.rollout` replaces it).
LABEL_TEMPLATE_HASH = "template-hash"


def slot_label(slot: int, incarnation: str = "") -> str:
    """`<incarnation>-<slot>`: a pool applied again under the same name (a new
    incarnation) adopts the devices an earlier one left, and must not take their
    slot numbers for its own creates in flight."""
    return f"{incarnation}-{slot}" if incarnation else str(slot)


# The health child of a pool, and the signals between them.
WORKFLOW_POOL_HEALTH = "PoolHealth"
SIGNAL_HEALTH_REPORT = "health_report"
SIGNAL_HEALTH_CONFIG = "health_config"


def health_workflow_id(pool: str) -> str:
    return f"{WORKFLOW_ID_PREFIX}{pool}/health"


# The per-account permit ledger (workflows/ledger/workflow.py; started: worker/accounts.py).
WORKFLOW_ACCOUNT_LEDGER = "AccountLedger"
LEDGER_ID_PREFIX = "devicepool-account/"
SIGNAL_LEDGER_CONFIGURE = "configure"
SIGNAL_PERMIT_REQUEST = "request_permits"
SIGNAL_PERMIT_INTENT = "expect_request"
SIGNAL_PERMIT_CANCEL = "cancel_permits"
SIGNAL_PERMITS_USED = "permits_used"
SIGNAL_RATE_LIMITED = "rate_limited"
# ledger → pool: the provider paused the account's creates for longer than a window
SIGNAL_ACCOUNT_PAUSED = "account_paused"
# ledger → pool: the account's spendCap (worker config) holds the pool's creates, or no longer
SIGNAL_ACCOUNT_CAPPED = "account_capped"
# Sent by the ledger to a provisioning batch.
SIGNAL_PERMITS_GRANTED = "permits_granted"
QUERY_LEDGER = "ledger"


def ledger_workflow_id(account: str) -> str:
    return f"{LEDGER_ID_PREFIX}{account}"


def account_from_ledger_id(workflow_id: str) -> str | None:
    return after(LEDGER_ID_PREFIX, workflow_id)


# The per-account orphan sweep (workflows/orphans/workflow.py; started: worker/accounts.py).
WORKFLOW_ORPHAN_SWEEP = "OrphanSweep"
SIGNAL_JANITOR_CONFIGURE = "configure"
UPDATE_SWEEP_ORPHANS = "sweep_orphans"
QUERY_ORPHANS = "orphans"


def janitor_workflow_id(account: str) -> str:
    return f"{LEDGER_ID_PREFIX}{account}/janitor"


def account_from_janitor_id(workflow_id: str) -> str | None:
    if workflow_id.startswith(LEDGER_ID_PREFIX) and workflow_id.endswith("/janitor"):
        return workflow_id[len(LEDGER_ID_PREFIX) : -len("/janitor")]
    return None


# The node registry (workflows/nodes/workflow.py): every node worker's last beat.
WORKFLOW_NODE_REGISTRY = "NodeRegistry"
NODE_REGISTRY_WORKFLOW_ID = "devicepool-nodes"
SIGNAL_NODE_BEAT = "node_beat"
QUERY_NODES = "nodes"
QUERY_NODE_PROXY_POOLS = "node_proxy_pools"
