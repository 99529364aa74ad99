"""Connect info of a held lease from the user's side: `Lease.connect()`,
`PoolClient.lease_connect` (docs/leases.md, "Connect info").

Through the pool's `lease_connect` update only while history is encrypted: the pool's worker
refuses otherwise (`LeaseRefused`), and a client without the history key is refused here,
before anything is asked (it could not read the answer). Without encryption,
`devicepool connect POOL LEASE --config WORKER_CONFIG` reads it outside Temporal."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.client import WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from devicepool.activities.connect_models import ConnectInfo
from devicepool.api.names import UPDATE_LEASE_CONNECT
from devicepool.client.errors import DevicePoolError, LeaseRefused
from devicepool.codec import ENV_KEY_FILES, EncryptionCodec
from devicepool.workflows.reconciler.connecting import CONNECT_FAILED, ConnectAnswer
from devicepool.workflows.reconciler.lease_messages import LeaseRef

if TYPE_CHECKING:
    from devicepool.client._leases import Lease
    from devicepool.client.pool_client import PoolClient

__all__ = ["connect_info", "connect_json", "connect_ref", "encrypts"]

# The pool reads the provider while the update waits: a browser opened on its node for it
# may take a node call's 90 s (workflows/browserpool/calls.py).
CONNECT_TIMEOUT = timedelta(seconds=120)


def connect_ref(pool: str, lease: str) -> dict[str, str]:
    """What `lease -o json` says for `connect` without encrypted history: where to read it."""
    return {"ref": f"devicepool connect {pool} {lease}"}


def connect_json(info: ConnectInfo) -> dict[str, Any]:
    """`connect` as the holder reads it: `adb` {ip, port, code}, `cdp` {ws, http}, `message`."""
    shown: dict[str, Any] = info.model_dump(mode="json", by_alias=True, exclude_none=True)
    if not shown.get("message"):
        shown.pop("message", None)
    return shown


def encrypts(pools: PoolClient) -> bool:
    """Whether this client holds a history key (it can read an encrypted answer)."""
    converter = getattr(pools._client, "data_converter", None)
    return isinstance(getattr(converter, "payload_codec", None), EncryptionCodec)


async def connect_info(
    pools: PoolClient, name: str, lease: Lease | str, *, kind: str | None = None
) -> ConnectInfo:
    """The lease's connect info, read now by the pool (`LeaseGone`: not held;
    `LeaseRefused`: history not encrypted, by the pool's worker or this client)."""
    from devicepool.client import _lease_calls, _leases

    kind = kind or (lease.kind if not isinstance(lease, str) else None)
    some_id = _leases._lease_id(lease)
    shown = pools._side(kind).shown(name)
    if not encrypts(pools):
        raise LeaseRefused(
            f"{shown}: connect info travels only through encrypted history, and this client has"
            f" no history key ({ENV_KEY_FILES}): `devicepool connect {name} {some_id} --config"
            " WORKER_CONFIG` reads it outside Temporal"
        )
    handle = _leases._handle(pools, name, kind)
    with _leases.lease_errors(pools, name, kind):
        try:
            async with _lease_calls.update_gate(pools, handle):  # in flight while it reads
                answer: ConnectAnswer = await handle.execute_update(
                    UPDATE_LEASE_CONNECT,
                    LeaseRef(lease=some_id),
                    result_type=ConnectAnswer,
                    rpc_timeout=CONNECT_TIMEOUT,
                )
        except WorkflowUpdateFailedError as err:
            cause = err.cause
            if isinstance(cause, ApplicationError) and cause.type == CONNECT_FAILED:
                raise DevicePoolError(f"{shown}: {cause.message}") from err  # exit 1
            raise
    return answer.connect
