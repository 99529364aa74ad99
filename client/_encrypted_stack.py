"""Whether a stack's history is encrypted, asked before a client without keys writes to it.

Without keys the CLI's codec (`EncryptedPayloadGuard`) lets plain payloads through: a pool
applied that way is stored in clear in a history its operator encrypted, and every later answer
fails to open. The worker's own workflows say which it is: the first event of the one a pool
depends on (its account's ledger; the node registry for a BrowserPool) carries the worker's
input, encrypted when the worker encrypts (docs/operations.md, 'Encrypted history')."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.service import RPCError

from devicepool.api.kinds import kind_named
from devicepool.api.names import KIND_DEVICE_POOL, NODE_REGISTRY_WORKFLOW_ID, ledger_workflow_id
from devicepool.codec import (
    ENCODING,
    ENV_KEY_FILES,
    KEY_ID_METADATA,
    EncryptedPayloadGuard,
    EncryptionKeyError,
)

# The account a manifest names when it names none (`spec.provider.account`): its ledger is the
# main worker's when no workflow a pool depends on runs yet (a BrowserPool before any node).
DEFAULT_ACCOUNT = "default"


async def refuse_keyless_apply(client: Any, pools: Sequence[Any]) -> None:
    """`EncryptionKeyError` (exit 2, nothing applied) when this client has no keys and the
    history `pools` would join is encrypted; nothing is asked when it has keys."""
    if not isinstance(client.data_converter.payload_codec, EncryptedPayloadGuard):
        return
    workflow_ids = dict.fromkeys(
        ledger_workflow_id(_account(pool))
        if pool.kind == KIND_DEVICE_POOL
        else NODE_REGISTRY_WORKFLOW_ID
        for pool in pools
    )
    seen = False
    for workflow_id in [*workflow_ids, ledger_workflow_id(DEFAULT_ACCOUNT)]:
        if seen and workflow_id not in workflow_ids:
            break  # the fallback only when none of the pools' own was there
        key_id = await _started_encrypted(client, workflow_id)
        seen = seen or key_id is not None
        if key_id:
            raise EncryptionKeyError(
                f"history is encrypted (key {key_id!r}) and no key is configured: a pool "
                f"applied now would be stored in clear and its answers would not open; set "
                f"{ENV_KEY_FILES} to the key files (`devicepool dev --encrypt` prints it as "
                "`For the CLI:`) — nothing was applied"
            )


def _account(pool: Any) -> str:
    """A DevicePool's account as it will be applied: the article's version (v1alpha1, from
    Python) names it `providerCredentialRef`, and `apply` converts it."""
    conversion = kind_named(pool.kind).conversion
    if isinstance(pool, conversion.alpha):
        pool = conversion.to_v1beta1(pool)
    return str(pool.spec.account)


async def _started_encrypted(client: Any, workflow_id: str) -> str | None:
    """The key id the workflow's start input is encrypted with, "" when it is plain, None when
    the workflow or the server cannot be read (the apply itself then says what is wrong)."""
    request = GetWorkflowExecutionHistoryRequest(
        namespace=client.namespace,
        execution=WorkflowExecution(workflow_id=workflow_id),
        maximum_page_size=1,
    )
    try:
        response = await client.workflow_service.get_workflow_execution_history(request)
    except RPCError:
        return None
    for event in response.history.events[:1]:
        for payload in event.workflow_execution_started_event_attributes.input.payloads:
            if payload.metadata.get("encoding") == ENCODING:
                key_id = payload.metadata.get(KEY_ID_METADATA, b"").decode("utf-8", "replace")
                return key_id or "?"
    return ""
