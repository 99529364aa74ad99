"""`devicepool upgrade --build-id B` with a build no worker ever polled fails at once (issue 43,
item 21): it waited 60 s for one before its error. A build the deployment knows is promoted as
before, retried while the server catches up."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
from temporalio.api.deployment.v1 import WorkerDeploymentInfo, WorkerDeploymentVersion
from temporalio.api.workflowservice.v1 import DescribeWorkerDeploymentResponse
from temporalio.service import RPCError, RPCStatusCode

from devicepool.client.errors import EXIT_OK, EXIT_RUNTIME
from tests.helpers.cli import cli, fake_temporal


class Service:
    """The deployment's side of Temporal's workflow service: the builds it knows (None: no
    such deployment), the current one, and how many times `set-current` is refused first."""

    def __init__(self, builds: list[str] | None, current: str = "", refused: int = 0) -> None:
        self.builds, self.current, self.refused = builds, current, refused
        self.sets: list[str] = []

    async def describe_worker_deployment(self, request: Any, **_: Any) -> Any:
        if self.builds is None:
            raise RPCError("no Worker Deployment found", RPCStatusCode.NOT_FOUND, b"")
        info = WorkerDeploymentInfo(name=request.deployment_name)
        for build in self.builds:
            summary = info.version_summaries.add()
            summary.deployment_version.CopyFrom(
                WorkerDeploymentVersion(deployment_name=request.deployment_name, build_id=build)
            )
        info.routing_config.current_deployment_version.build_id = self.current
        return DescribeWorkerDeploymentResponse(worker_deployment_info=info)

    async def set_worker_deployment_current_version(self, request: Any, **_: Any) -> Any:
        self.sets.append(request.build_id)
        if self.builds is None or request.build_id not in self.builds:
            raise RPCError("no Worker Deployment found", RPCStatusCode.NOT_FOUND, b"")
        if self.refused:
            self.refused -= 1
            raise RPCError("version not found", RPCStatusCode.NOT_FOUND, b"")
        self.current = request.build_id
        return None


class Temporal:
    def __init__(self, service: Service) -> None:
        self.namespace = "default"
        self.workflow_service = service

    async def list_workflows(self, query: str) -> Any:
        for _ in ():
            yield SimpleNamespace()


@pytest.mark.parametrize(
    ("builds", "said"),
    [
        (
            ["build-a", "build-b"],
            "error: cannot make build 'nonexistent' current in deployment 'devicepool': "
            "no worker of that build has polled it (its builds: build-a, build-b); "
            "are its workers running?",
        ),
        (
            None,
            "error: cannot make build 'nonexistent' current in deployment 'devicepool': "
            "no versioned worker has polled that deployment (--deployment-name); "
            "are its workers running?",
        ),
    ],
)
def test_a_build_no_worker_ever_polled_fails_at_once(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    builds: list[str] | None,
    said: str,
) -> None:
    service = Service(builds, current="build-a")
    fake_temporal(monkeypatch, Temporal(service))
    started = time.monotonic()
    code, out, err = cli(capsys, "upgrade", "--build-id", "nonexistent")
    assert time.monotonic() - started < 5
    assert (code, out, err) == (EXIT_RUNTIME, "", said + "\n")
    assert service.sets == []  # nothing asked of the server: nothing changed


def test_a_build_the_deployment_knows_is_promoted_retried_while_the_server_catches_up(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    service = Service(["build-a", "build-b"], current="build-a", refused=1)
    fake_temporal(monkeypatch, Temporal(service))
    code, out, err = cli(capsys, "upgrade", "--build-id", "build-b", "-o", "json")
    assert (code, err) == (EXIT_OK, "")
    assert service.sets == ["build-b", "build-b"]
    assert '"currentBuild": "build-b"' in out
