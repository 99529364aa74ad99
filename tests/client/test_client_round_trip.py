"""What `devicepool get POOL -o yaml` prints applies again (issue 28, item 4), as in kubectl.

The document is built the way `get` builds it (`PoolSummary.to_resource` over the
pool's `spec` and `status` query answers, printed by `render.print_data`), then
read back by the loader `apply -f` uses.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from devicepool.api import ManifestError, load_manifests, load_manifests_text
from devicepool.api.conversion import API_VERSIONS
from devicepool.api.names import API_VERSION_STORED
from devicepool.api.v1beta1 import (
    Condition,
    ConditionStatus,
    DevicePoolSpec,
    DevicePoolStatus,
    ObjectMeta,
    Phase,
)
from devicepool.client._results import PoolSummary
from devicepool.client.render import Output, print_data

SPEC = DevicePoolSpec.model_validate(
    {
        "platform": "android",
        "region": "us-west",
        "osVersion": "14",
        "replicas": 50,
        "proxy": {"poolRef": "proxyseller-us", "sessionTTL": "15m"},
        "health": {"offlineAfter": "2m30s"},
    }
)


def _get_yaml(capsys: pytest.CaptureFixture[str], api_version: str = API_VERSION_STORED) -> str:
    status = DevicePoolStatus(
        phase=Phase.READY,
        desired_replicas=50,
        ready_devices=50,
        device_ids=["dev-1", "dev-2"],
        last_reconciled=datetime(2025, 1, 31, 12, tzinfo=UTC),
        observed_generation=3,
        conditions=[Condition(type="Ready", status=ConditionStatus.TRUE, reason="Converged")],
    )
    summary = PoolSummary(
        name="tiktok-us-pool",
        spec=SPEC.to_json_dict(),
        status=status.to_json_dict(),
        created=datetime(2025, 1, 30, 8, tzinfo=UTC),
        metadata=ObjectMeta(name="tiktok-us-pool", labels={"team": "growth"}).to_json_dict(),
    )
    print_data(summary.to_resource(api_version), Output.YAML)
    return capsys.readouterr().out


@pytest.mark.parametrize("api_version", API_VERSIONS)
def test_what_get_prints_applies_again(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, api_version: str
) -> None:
    # `get -o yaml` shows the stored v1beta1; `--api-version v1alpha1` converts
    # back, the v1beta1-only fields kept in an annotation. Either applies again.
    text = _get_yaml(capsys, api_version)
    assert f"apiVersion: {api_version}\n" in text
    assert "creationTimestamp" in text and "status:" in text  # what used to be refused
    edited = tmp_path / "f.yaml"
    edited.write_text(text.replace("replicas: 50", "replicas: 80"))
    [pool] = load_manifests(edited)
    assert pool.name == "tiktok-us-pool"
    assert pool.metadata.labels == {"team": "growth"}
    assert pool.spec == SPEC.model_copy(update={"replicas": 80})
    assert pool.status is None  # the server's word, never the user's


@pytest.mark.parametrize(
    "field", ["uid: 6f1c", "generation: 4", "resourceVersion: '12'", "creationTimestamp: x"]
)
def test_server_set_metadata_is_ignored(field: str) -> None:
    text = f"apiVersion: mobile.example.com/v1alpha1\nkind: DevicePool\nmetadata:\n  name: p\n  {field}\n"
    [pool] = load_manifests_text(
        text + "spec: {platform: android, region: us-west, replicas: 1}\n", source="f.yaml"
    )
    assert pool.name == "p"


def test_any_other_unknown_field_is_still_refused(capsys: pytest.CaptureFixture[str]) -> None:
    text = _get_yaml(capsys).replace(
        "  name: tiktok-us-pool\n", "  name: tiktok-us-pool\n  owner: me\n"
    )
    with pytest.raises(ManifestError) as info:
        load_manifests_text(text, source="f.yaml")
    assert info.value.problems == [
        "f.yaml: metadata.owner: unknown field (known fields: name, labels, annotations)"
    ]
