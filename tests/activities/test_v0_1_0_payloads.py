"""Messages still decode the payloads v0.1.0 wrote (tests/replay/histories/v0.1.0).

The device template moved into one model carried whole (`DeviceTemplate`), and
the ledger's and janitor's carried state became typed; a running workflow, a
create in flight at an upgrade and the recorded histories still hold the old
shapes.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from devicepool.activities.models import CreateDeviceInput, DeviceTemplate, device_template
from devicepool.api.loader import load_manifests_text
from devicepool.workflows.ledger.state import LedgerInput, LedgerState
from devicepool.workflows.orphans.state import JanitorInput
from devicepool.workflows.shared.protocol import ProvisionBatchInput

HISTORIES = Path(__file__).parents[1] / "replay" / "histories" / "v0.1.0"


def started_with(name: str) -> dict[str, Any]:
    """The input a recorded workflow was started with, as JSON."""
    events = json.loads((HISTORIES / name).read_text())["events"]
    attributes = events[0]["workflowExecutionStartedEventAttributes"]
    return json.loads(base64.b64decode(attributes["input"]["payloads"][0]["data"]))


def test_a_v0_1_0_batch_input_carries_its_flat_fields_as_one_template() -> None:
    recorded = started_with("provision-1.json")
    assert "osVersion" in recorded and "template" not in recorded
    batch = ProvisionBatchInput.model_validate(recorded)
    assert batch.template == DeviceTemplate(platform="android", region="us-west", os_version="14")
    again = ProvisionBatchInput.model_validate(batch.to_json_dict())
    assert again == batch


def test_a_v0_1_0_create_input_decodes_in_either_spelling() -> None:
    flat = {
        "account": "default",
        "pool": "p",
        "platform": "ios",
        "region": "eu",
        "osVersion": "17",
        "name": "p-0",
        "idempotencyKey": "k",
        "proxyPool": "residential",
        "stickyTtl": 900,
        "extraLabels": {"slot": "0"},
    }
    create = CreateDeviceInput.model_validate(flat)
    assert create.template == DeviceTemplate(
        platform="ios", region="eu", os_version="17", proxy_pool="residential", sticky_ttl=900
    )
    snake = CreateDeviceInput(
        account="default",
        pool="p",
        platform="ios",
        region="eu",
        os_version="17",
        name="p-0",
        idempotency_key="k",
        proxy_pool="residential",
        sticky_ttl=900,
        extra_labels={"slot": "0"},
    )
    assert snake == create
    assert "template" in create.to_json_dict() and "osVersion" not in create.to_json_dict()


def test_a_template_field_beside_a_template_is_refused() -> None:
    template = {"platform": "android", "region": "r", "osVersion": "14"}
    with pytest.raises(ValueError, match="region"):
        ProvisionBatchInput.model_validate(
            {
                "pool": "p",
                "parentWorkflowId": "devicepool/p",
                "account": "a",
                "template": template,
                "region": "other",
                "generation": 1,
                "slots": [0],
            }
        )


def test_the_template_is_built_once_from_the_spec() -> None:
    (pool,) = load_manifests_text(
        """
apiVersion: mobile.example.com/v1alpha1
kind: DevicePool
metadata: {name: tiktok-us-pool}
spec:
  provider: bitcloudphone
  platform: android
  region: us-west
  osVersion: "14"
  replicas: 50
  proxy: {poolRef: proxyseller-us, stickyTTL: 900}
"""
    )
    assert device_template(pool.spec) == DeviceTemplate(
        platform="android",
        region="us-west",
        os_version="14",
        proxy_pool="proxyseller-us",
        sticky_ttl=900,
    )
    bare = pool.spec.model_copy(update={"proxy": None})
    assert (device_template(bare).proxy_pool, device_template(bare).sticky_ttl) == (None, 0)


def test_the_janitors_carried_state_decodes_typed() -> None:
    recorded = started_with("orphans-2.json")
    janitor = JanitorInput.model_validate(recorded)
    assert janitor.state is not None
    assert janitor.state.terminated_total == 1
    assert janitor.state.swept[0].device.pool == "orphaned"
    assert JanitorInput.model_validate(janitor.to_json_dict()) == janitor


def test_the_ledgers_carried_state_decodes_typed() -> None:
    assert LedgerInput.model_validate(started_with("ledger-1.json")).state is None
    state = LedgerState(paused_reason="429")
    carried = LedgerInput(account="a", state=state).to_json_dict()
    assert LedgerInput.model_validate(carried).state == state
