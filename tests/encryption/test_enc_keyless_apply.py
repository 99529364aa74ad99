"""`apply` without a key against an encrypted stack refuses before anything is written.

Without keys the CLI's codec passes plain payloads through, so a pool applied that way was
stored in clear in a history its operator encrypted, and every later answer failed to open.
The check reads the first event of the worker's own workflow the pool depends on (its
account's ledger; the node registry for a BrowserPool): encrypted there means encrypted here.
A fake Temporal client stands in: the probe is two protobuf messages."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.history.v1 import HistoryEvent
from temporalio.api.workflowservice.v1 import (
    GetWorkflowExecutionHistoryRequest,
    GetWorkflowExecutionHistoryResponse,
)
from temporalio.service import RPCError, RPCStatusCode

from devicepool.api.loader import load_resources
from devicepool.api.names import NODE_REGISTRY_WORKFLOW_ID, ledger_workflow_id
from devicepool.client._encrypted_stack import refuse_keyless_apply
from devicepool.codec import (
    ENCODING,
    ENV_KEY_FILES,
    KEY_ID_METADATA,
    EncryptedPayloadGuard,
    EncryptionCodec,
    EncryptionKeyError,
    KeyRing,
)
from tests.encryption.test_enc_codec import key_file

ROOT = Path(__file__).resolve().parents[2]


def started(*payloads: Payload) -> GetWorkflowExecutionHistoryResponse:
    response = GetWorkflowExecutionHistoryResponse()
    event = HistoryEvent(event_id=1)
    event.workflow_execution_started_event_attributes.input.payloads.extend(payloads)
    response.history.events.append(event)
    return response


ENCRYPTED = Payload(metadata={"encoding": ENCODING, KEY_ID_METADATA: b"dev"}, data=b"\x00" * 40)
PLAIN = Payload(metadata={"encoding": b"json/plain"}, data=b"{}")


@dataclass
class FakeService:
    histories: dict[str, GetWorkflowExecutionHistoryResponse]
    asked: list[str] = field(default_factory=list)

    async def get_workflow_execution_history(
        self, request: GetWorkflowExecutionHistoryRequest, **_: Any
    ) -> GetWorkflowExecutionHistoryResponse:
        workflow_id = request.execution.workflow_id
        self.asked.append(workflow_id)
        assert request.maximum_page_size == 1
        if workflow_id not in self.histories:
            raise RPCError("not found", RPCStatusCode.NOT_FOUND, b"")
        return self.histories[workflow_id]


@dataclass
class FakeConverter:
    payload_codec: Any


@dataclass
class FakeClient:
    workflow_service: FakeService
    data_converter: FakeConverter = field(
        default_factory=lambda: FakeConverter(EncryptedPayloadGuard())
    )
    namespace: str = "default"


def quickstart() -> list[Any]:
    return load_resources(ROOT / "examples" / "quickstart.yaml")


def browserpool() -> list[Any]:
    return load_resources(ROOT / "examples" / "browserpool.yaml")


async def test_a_keyless_apply_to_an_encrypted_stack_is_refused_naming_what_to_set() -> None:
    service = FakeService({ledger_workflow_id("default"): started(ENCRYPTED)})
    with pytest.raises(EncryptionKeyError) as refused:
        await refuse_keyless_apply(FakeClient(service), quickstart())
    said = str(refused.value)
    assert "\n" not in said
    assert "history is encrypted (key 'dev') and no key is configured" in said
    assert f"set {ENV_KEY_FILES}" in said and "nothing was applied" in said
    assert service.asked == [ledger_workflow_id("default")]


async def test_a_browserpool_is_checked_against_the_node_registry() -> None:
    service = FakeService({NODE_REGISTRY_WORKFLOW_ID: started(ENCRYPTED)})
    with pytest.raises(EncryptionKeyError):
        await refuse_keyless_apply(FakeClient(service), browserpool())


async def test_without_a_node_registry_a_browserpool_asks_the_default_ledger() -> None:
    # No node worker has run yet (a stack without --browser-nodes): the main worker's own
    # ledger says how it writes.
    service = FakeService({ledger_workflow_id("default"): started(ENCRYPTED)})
    with pytest.raises(EncryptionKeyError):
        await refuse_keyless_apply(FakeClient(service), browserpool())
    assert service.asked == [NODE_REGISTRY_WORKFLOW_ID, ledger_workflow_id("default")]


@pytest.mark.parametrize(
    "histories",
    [
        {},  # no worker yet: the apply says so itself
        {ledger_workflow_id("default"): started(PLAIN)},
        {ledger_workflow_id("default"): started()},  # no input at all
    ],
)
async def test_a_plain_or_absent_history_lets_the_apply_go(histories: dict[str, Any]) -> None:
    await refuse_keyless_apply(FakeClient(FakeService(histories)), quickstart())


async def test_with_a_key_nothing_is_asked(tmp_path: Path) -> None:
    service = FakeService({ledger_workflow_id("default"): started(ENCRYPTED)})
    codec = EncryptionCodec(KeyRing.from_files([key_file(tmp_path, "dev")]))
    client = FakeClient(service, FakeConverter(codec))
    await refuse_keyless_apply(client, quickstart())
    assert service.asked == []


async def test_an_unreachable_server_is_left_to_the_apply() -> None:
    class Down(FakeService):
        async def get_workflow_execution_history(self, *_: Any, **__: Any) -> Any:
            raise RPCError("down", RPCStatusCode.UNAVAILABLE, b"")

    await refuse_keyless_apply(FakeClient(Down({})), quickstart())


async def test_apply_many_asks_before_anything_is_applied() -> None:
    # What `devicepool apply -f` calls: refused before the account check or any start.
    from devicepool.client.pool_client import PoolClient

    service = FakeService({ledger_workflow_id("default"): started(ENCRYPTED)})
    with pytest.raises(EncryptionKeyError):
        await PoolClient(FakeClient(service)).apply_many(quickstart())  # type: ignore[arg-type]
    assert service.asked == [ledger_workflow_id("default")]


def alpha_pool(account: str) -> Any:
    """A DevicePool in the article's version (v1alpha1), as Python code builds one."""
    from devicepool.api.v1alpha1 import DevicePool as AlphaPool

    return AlphaPool.model_validate(
        {
            "apiVersion": "mobile.example.com/v1alpha1",
            "kind": "DevicePool",
            "metadata": {"name": "alpha"},
            "spec": {
                "provider": "bitcloudphone",
                "platform": "android",
                "region": "us-west",
                "replicas": 1,
                "providerCredentialRef": account,
            },
        }
    )


async def test_a_v1alpha1_pool_is_checked_against_its_own_account() -> None:
    # `apply_many` takes the article's version from Python (`apply` converts it): its account
    # is `providerCredentialRef`, read as the pool will be applied, not an AttributeError.
    from devicepool.client.pool_client import PoolClient

    service = FakeService({ledger_workflow_id("acme"): started(ENCRYPTED)})
    with pytest.raises(EncryptionKeyError):
        await PoolClient(FakeClient(service)).apply_many([alpha_pool("acme")])  # type: ignore[arg-type]
    assert service.asked == [ledger_workflow_id("acme")]
    plain = FakeService({ledger_workflow_id("acme"): started(PLAIN)})
    await refuse_keyless_apply(FakeClient(plain), [alpha_pool("acme")])
    assert plain.asked == [ledger_workflow_id("acme")]
