"""The sandbox a cached workflow lives in holds one module of ours: its own workflow module.

The SDK's sandbox re-imports, for every workflow it runs (each cached one keeps
its copy), every module that is not passed through. With the defaults that was
the whole `devicepool.workflows` package: all five workflow modules and seven
helpers, ~450 KiB and ~40 ms of CPU a workflow, so 1,000 pools (a pool and its
health check each) cost ~900 MiB of a worker's 1.66 GiB. The worker now passes
every module of ours through except the workflow's own (`worker/build.py`,
`workflow_runner`) and `devicepool.workflows` loads its workflow modules only
when asked. The workflow's own module is still re-imported, so the sandbox still
catches a non-deterministic call in it.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
import temporalio.workflow
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import (
    RestrictedWorkflowAccessError,
    SandboxedWorkflowRunner,
)

from devicepool.activities.devices import DeviceActivities
from devicepool.worker import build
from devicepool.workflows import WORKFLOWS


def pool_queue_runner(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The `workflow_runner` the production pool-queue worker is built with."""
    made: list[dict[str, Any]] = []

    def recorded(client: Any, **options: Any) -> Worker:
        made.append(options)
        return object()  # type: ignore[return-value]

    monkeypatch.setattr(build, "Worker", recorded)
    build.pool_queue_workers(object(), DeviceActivities(accounts={}, proxy_pools={}))  # type: ignore[arg-type]
    (pools,) = [options for options in made if options["workflows"]]
    return pools.get("workflow_runner", SandboxedWorkflowRunner())  # `Worker`'s default


def sandboxes(monkeypatch: pytest.MonkeyPatch, runner: SandboxedWorkflowRunner) -> dict[type, Any]:
    """One sandboxed instance of every workflow type, as the worker creates them."""
    made: list[Any] = []
    create = SandboxedWorkflowRunner.create_instance

    def kept(self: SandboxedWorkflowRunner, details: Any) -> Any:
        made.append(create(self, details))
        return made[-1]

    monkeypatch.setattr(SandboxedWorkflowRunner, "create_instance", kept)
    instances = {}
    for cls in WORKFLOWS:
        runner.prepare_workflow(temporalio.workflow._Definition.must_from_class(cls))
        instances[cls] = made[-1]
    return instances


def reimported(instance: Any) -> set[str]:
    """The modules of ours this sandbox imported afresh (not the worker's own)."""
    return {
        name
        for name, module in instance.importer.new_modules.items()
        if name.split(".")[0] == "devicepool" and module is not sys.modules.get(name)
    }


async def test_each_workflow_re_imports_only_its_own_module(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runner = pool_queue_runner(monkeypatch)
    assert isinstance(runner, SandboxedWorkflowRunner)
    for cls, instance in sandboxes(monkeypatch, runner).items():
        package = cls.__module__.rsplit(".", 1)[0]  # its sub-package's (empty) __init__
        assert reimported(instance) == {
            "devicepool",
            "devicepool.workflows",
            package,
            cls.__module__,
        }, cls


async def test_the_sandbox_still_catches_a_clock_read_in_workflow_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`datetime.now()` in a workflow module raises, as it did with the SDK's defaults."""
    instances = sandboxes(monkeypatch, pool_queue_runner(monkeypatch))
    for cls, instance in instances.items():
        module = instance.importer.new_modules[cls.__module__]
        if not hasattr(module, "datetime"):
            continue  # this workflow module imports no datetime
        instance.importer.restriction_context.is_runtime = True
        try:
            with pytest.raises(RestrictedWorkflowAccessError):
                module.datetime.now()
        finally:
            instance.importer.restriction_context.is_runtime = False
    checked = [
        c for c, i in instances.items() if hasattr(i.importer.new_modules[c.__module__], "datetime")
    ]
    # Those whose own module reads `datetime` at all (the pool's gets its clock from
    # `workflow.now()` only): the check must not pass by checking nothing.
    assert {c.__name__ for c in checked} >= {"PoolHealthWorkflow", "ProvisionBatchWorkflow"}
