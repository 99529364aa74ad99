"""`TaskQueueWorkers`: which workers poll the pools' task queues (DescribeTaskQueue), for
`get`'s stale marks (`is_served`)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.common import SearchAttributeKey

from devicepool.client._temporal_errors import QUERY_TIMEOUT

# A worker's poll of its queue is a long poll (about a minute on the server): its last
# access is when it began. Not one this recent: no worker serves the queue.
POLLED_WITHIN = timedelta(minutes=2)
# `get -w`: a task queue's workers are asked again at most this often.
WORKERS_FOR_SECONDS = 30.0

# A queue's workers as DescribeTaskQueue saw them: each one's version (as a pinned execution
# names it, in either spelling; none unversioned) and its last poll; None: not known (the
# call failed, or an execution without its queue).
Pollers = list[tuple[frozenset[str], datetime]] | None
# What a listed execution says of its Worker Versioning (system search attributes).
_KEY_BEHAVIOR = SearchAttributeKey.for_keyword("TemporalWorkflowVersioningBehavior")
_KEY_VERSION = SearchAttributeKey.for_keyword("TemporalWorkerDeploymentVersion")


def _version(options: Any) -> frozenset[str]:
    if not options.build_id:
        return frozenset()
    return frozenset(f"{options.deployment_name}{sep}{options.build_id}" for sep in ":.")


class TaskQueueWorkers:
    """Which workers poll the pools' task queues: one DescribeTaskQueue a queue, kept for
    `WORKERS_FOR_SECONDS`; `get -w` asks one due queue a refresh instead of its List call
    (`due`, `ask`), the queue asked longest ago first."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._known: dict[str, tuple[float, Pollers]] = {}

    async def served(self, queues: Iterable[str | None]) -> dict[str | None, Pollers]:
        wanted = sorted(q for q in set(queues) if q)
        due = self.due(wanted)
        await asyncio.gather(*map(self.ask, due))
        return self.known(wanted)

    def due(self, queues: Iterable[str | None]) -> list[str]:
        """The queues whose workers are due to be asked, never asked ones first, then the
        one asked longest ago."""
        now = time.monotonic()
        wanted = sorted(q for q in set(queues) if q)
        due = [q for q in wanted if q not in self._known or self._known[q][0] <= now]
        return sorted(due, key=lambda q: self._known[q][0] if q in self._known else -math.inf)

    async def ask(self, queue: str) -> None:
        pollers = await self._pollers(queue)
        self._known[queue] = (time.monotonic() + WORKERS_FOR_SECONDS, pollers)

    def known(self, queues: Iterable[str | None]) -> dict[str | None, Pollers]:
        """What was last seen of each queue's workers (None: never asked)."""
        return {q: self._known[q][1] if q in self._known else None for q in set(queues) if q}

    async def _pollers(self, queue: str) -> Pollers:
        try:
            answer = await self._client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=self._client.namespace,
                    task_queue=TaskQueue(name=queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
                    task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
                ),
                timeout=QUERY_TIMEOUT,
            )
        except Exception:  # not allowed, not answered, a stand-in without it: not known
            return None
        return [
            (_version(p.deployment_options), p.last_access_time.ToDatetime(tzinfo=UTC))
            for p in answer.pollers
        ]


def is_served(pollers: Pollers, execution: Any) -> bool:
    """Whether a worker polled the execution's queue lately (one of its build, if the
    execution is pinned to one); not known counts as served."""
    if pollers is None:
        return True
    since = datetime.now(UTC) - POLLED_WITHIN
    build = _pinned_build(execution)
    return any(at >= since and (not build or build in of) for of, at in pollers)


def _pinned_build(execution: Any) -> str:
    """The Worker Versioning build ("deployment:build") a listed execution is pinned to, as
    its system search attributes say; "" for none (unversioned, auto-upgrade, not said)."""
    attrs = execution.typed_search_attributes
    if attrs.get(_KEY_BEHAVIOR) != "Pinned":
        return ""
    return str(attrs.get(_KEY_VERSION) or "")
