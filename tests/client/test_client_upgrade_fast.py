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

    def __init__(
        self,
        builds: list[str] | None,
        current: str = "",
        refused: int = 0,
        polling: tuple[str, ...] = (),
    ) -> None:
        self.builds, self.current, self.refused = builds, current, refused
        # Builds whose workers poll the task queue, listed by the deployment only later.
        self.polling = polling
        self.sets: list[str] = []

    async def describe_task_queue(self, request: Any, **_: Any) -> Any:
        from temporalio.api.workflowservice.v1 import DescribeTaskQueueResponse

        assert request.task_queue.name == "devicepool"
        answer = DescribeTaskQueueResponse()
        for build in self.polling:
            poller = answer.pollers.add()
            poller.deployment_options.deployment_name = "devicepool"
            poller.deployment_options.build_id = build
        return answer

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
        if request.build_id in self.polling:
            self.polling = ()
            self.builds = [*(self.builds or []), request.build_id]
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


NOT_YET = "; a just-deployed build's workers may not have polled yet: run it again once they are up"


@pytest.mark.parametrize(
    ("builds", "said"),
    [
        (
            ["build-a", "build-b"],
            "error: cannot make build 'nonexistent' current in deployment 'devicepool': "
            f"no worker of that build has polled it (its builds: build-a, build-b){NOT_YET}",
        ),
        (
            [],
            "error: cannot make build 'nonexistent' current in deployment 'devicepool': "
            f"no worker of that build has polled it (the deployment lists no build yet){NOT_YET}",
        ),
        (
            None,
            "error: cannot make build 'nonexistent' current in deployment 'devicepool': "
            f"no versioned worker has polled that deployment (--deployment-name){NOT_YET}",
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


def test_a_build_whose_workers_poll_before_the_deployment_lists_it_is_promoted(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step 2 straight after step 1: the new workers poll, but the server lists a version
    only once it has recorded their first poll. Their polls on the task queue say it is
    coming: `promote` waits for it, as before, instead of the refusal."""
    service = Service(["build-a"], current="build-a", polling=("build-b",))
    fake_temporal(monkeypatch, Temporal(service))
    code, out, err = cli(capsys, "upgrade", "--build-id", "build-b", "-o", "json")
    assert (code, err) == (EXIT_OK, "")
    assert service.sets == ["build-b"]
    assert '"currentBuild": "build-b"' in out
