"""The long watches: a pool's (`watch_devices`) and its health check's (`watch_health`).

Both run on the `devicepool-watch` task queue, heartbeat while they poll, and
return only when something changed (or at `max_seconds`), so a quiet pool costs
its history a few events an hour. How `watch_health` shares the pool's own
listing and reads afresh what it answers: `_watch_health`. A mixin of
`DeviceActivities` over `AccountProviders`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

from temporalio import activity
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import WorkflowExecutionDescription, WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.service import RPCError, RPCStatusCode

from devicepool.activities import models as am
from devicepool.activities import pool_runs
from devicepool.activities.accounts import AccountProviders
from devicepool.activities.device_views import health_suspects
from devicepool.activities.errors import ProviderError, to_application_error
from devicepool.activities.heartbeats import heartbeating
from devicepool.activities.providers.base import provider_call
from devicepool.api.errors import ErrorType

__all__ = ["WatchActivities"]


def _health_answer(
    pool: am.PoolRunResult,
    listing: tuple[datetime, list[am.DeviceInfo]],
    *,
    startup: timedelta,
    previous: datetime | None,
) -> am.WatchHealthResult:
    """`watch_health`'s answer on one listing: the suspects in it and a count."""
    checked_at, devices = listing
    suspects = health_suspects(devices, now=checked_at, startup_timeout=startup)
    return am.WatchHealthResult(
        pool=pool,
        devices=len(devices),
        suspects=suspects,
        fingerprint=am.suspects_fingerprint(suspects),
        checked_at=checked_at,
        previous_check_at=previous,
    )


# How long a watch told "not found" waits for Temporal to say whether its run still runs.
_ASK_SECONDS = 5.0


@asynccontextmanager
async def _quiet_if_orphaned() -> AsyncIterator[None]:
    """A watch cancelled because its workflow is gone (it ended while this watch, dropped,
    had not heard its cancel yet) ends as a benign failure: nobody is left to answer,
    and the SDK logs it at debug, not as a failed activity with a traceback.

    The server answers "not found" to the heartbeat of an attempt it timed out too
    (the worker's event loop stalled past the heartbeat timeout) while the run goes
    on: so the run is asked first, and unless it ended the watch says so, loudly."""
    try:
        yield
    except asyncio.CancelledError:
        details = activity.cancellation_details()
        if details is not None and details.not_found and not details.cancel_requested:
            if await _own_run_ended():
                raise ApplicationError(
                    "its workflow is gone",
                    type=ErrorType.NOT_FOUND.value,
                    non_retryable=True,
                    category=ApplicationErrorCategory.BENIGN,
                ) from None
            activity.logger.warning(
                "this attempt is no longer the current one (timed out: the worker's event "
                "loop may have stalled past the heartbeat timeout); its workflow runs on, "
                "or Temporal did not say",
                exc_info=True,
            )
        raise


async def _own_run() -> tuple[WorkflowExecutionDescription | None, bool]:
    """This activity's workflow run as Temporal describes it, and whether Temporal said the
    run is gone: (None, False) when it is not known (no workflow, no answer in time)."""
    info = activity.info()
    if info.workflow_id is None:
        return None, False
    try:
        handle = activity.client().get_workflow_handle(
            info.workflow_id, run_id=info.workflow_run_id
        )
        return await asyncio.wait_for(handle.describe(), _ASK_SECONDS), False
    except RPCError as err:
        return None, err.status == RPCStatusCode.NOT_FOUND
    except (TimeoutError, RuntimeError):
        return None, False


async def _own_run_ended() -> bool:
    """Whether the workflow run of this activity ended (False: it runs, or not known)."""
    described, gone = await _own_run()
    if described is None:
        return gone
    return described.status != WorkflowExecutionStatus.RUNNING


# A dropped watch (its pool handed over or deleted, or its workflow started another) hears
# its cancel only from a heartbeat's answer: once in 0.8 × its heartbeat timeout, eight
# minutes for a quiet one. One that hears later than this asks Temporal this often instead
# (a describe of its own run: no billed Action) whether it is still waited for.
OWN_RUN_EVERY_SECONDS = 60.0


class _StillWanted:
    """`check`: a benign end for a watch its workflow no longer waits for, asked of Temporal
    every `OWN_RUN_EVERY_SECONDS` by a watch whose heartbeats bring a cancel later than that."""

    def __init__(self) -> None:
        timeout = activity.info().heartbeat_timeout
        hears_in = 0.8 * timeout.total_seconds() if timeout else None
        self._asks = hears_in is None or hears_in > OWN_RUN_EVERY_SECONDS
        self._due = time.monotonic() + OWN_RUN_EVERY_SECONDS

    async def check(self) -> None:
        if not self._asks or time.monotonic() < self._due:
            return
        self._due = time.monotonic() + OWN_RUN_EVERY_SECONDS
        why = await _why_not_wanted()
        if why is not None:
            raise ApplicationError(
                f"no longer waited for: {why}",
                type=ErrorType.NOT_FOUND.value,
                non_retryable=True,
                category=ApplicationErrorCategory.BENIGN,
            )


async def _why_not_wanted() -> str | None:
    """Why this attempt's workflow no longer waits for it (its run ended, the activity was
    cancelled or is no longer pending, another attempt runs), or None: it does, or not known."""
    described, gone = await _own_run()
    if described is None:
        return "its workflow is gone" if gone else None
    if described.status != WorkflowExecutionStatus.RUNNING:
        ended = described.status.name if described.status else "status not said"
        return f"its workflow run ended ({ended})"
    raw = getattr(described, "raw_description", None)
    if raw is None:
        return None
    info = activity.info()
    mine = [p for p in raw.pending_activities if p.activity_id == info.activity_id]
    if not mine:
        return "it is no longer pending"
    if mine[0].attempt != info.attempt:
        return f"attempt {mine[0].attempt} runs, not this one ({info.attempt})"
    if mine[0].state == PendingActivityState.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED:
        return "it was cancelled"
    return None


class WatchActivities(AccountProviders):
    """The two long-running activities (`watch_queue_activities()` of `DeviceActivities`)."""

    @activity.defn
    async def watch_devices(self, input: am.WatchDevicesInput) -> am.WatchDevicesResult:
        async with _quiet_if_orphaned():
            return await self._watch_devices(input)

    async def _watch_devices(self, input: am.WatchDevicesInput) -> am.WatchDevicesResult:
        self._provider(input.account)  # an unknown account fails at once, not at the deadline
        deadline = time.monotonic() + input.max_seconds
        health_due = time.monotonic() + input.health_every_seconds
        poll = max(input.poll_seconds, 0.0)
        devices: list[am.DeviceInfo] | None = None
        fingerprint = ""  # of `devices`, the last listing that answered
        last_error: ProviderError | None = None
        wanted = _StillWanted()
        while True:
            await wanted.check()  # before the provider is listed for nobody
            try:
                # Heartbeats while listing too: a slow or endless listing stays cancellable.
                async with heartbeating():
                    devices = await self._pool_devices(input.account, input.pool)
                last_error = None
                fingerprint = am.device_fingerprint(devices)
                if fingerprint != input.fingerprint:
                    return am.WatchDevicesResult.answer(
                        devices, input, fingerprint=fingerprint, changed=True
                    )
            except ProviderError as exc:
                if not exc.retryable:
                    raise to_application_error(exc) from exc
                last_error = exc
                activity.logger.warning(
                    "pool %s: listing devices failed, will poll again: %s", input.pool, exc
                )
            if input.health_workflow_id and devices is not None and time.monotonic() >= health_due:
                health_due = time.monotonic() + input.health_every_seconds
                if not await pool_runs.still_running(activity.client(), input.health_workflow_id):
                    return am.WatchDevicesResult.answer(
                        devices, input, fingerprint=fingerprint, changed=False, health_ended=True
                    )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if devices is None:
                    # Never saw the pool at all: an empty "unchanged" answer would lie.
                    assert last_error is not None
                    raise to_application_error(last_error) from last_error
                return am.WatchDevicesResult.answer(
                    devices, input, fingerprint=fingerprint, changed=False
                )
            activity.heartbeat()
            # Cancellation (delivered through the heartbeat) lands here as CancelledError.
            await asyncio.sleep(min(poll, remaining))

    @activity.defn
    async def watch_health(self, input: am.WatchHealthInput) -> am.WatchHealthResult:
        async with _quiet_if_orphaned():
            return await self._watch_health(input)

    async def _watch_health(self, input: am.WatchHealthInput) -> am.WatchHealthResult:
        """Poll every `poll_seconds` until the suspects differ from `fingerprint`, the
        pool is gone, `until` (after a fresh read there) or `max_seconds`.

        A poll reads the pool's listing this process made for the pool's own
        watch when there is one at most `reuse_listing_seconds` old; otherwise
        the provider, but no sooner than `own_read_seconds` after this watch's
        last read of its own (a poll in between only asks whether the pool still
        runs). What it answers is always a fresh read of its own: a change seen on
        the pool's listing, or on a plain read, is read again first.

        Each poll first asks Temporal whether the pool still runs (not knowing is
        running); a provider error is polled past, except on a fresh read (`once`,
        `until`), where the check must not judge on old data: it raises.
        """
        self._provider(input.account)  # an unknown account fails at once, not at the deadline
        start = time.monotonic()
        deadline = start + input.max_seconds
        until = (
            None
            if input.until is None
            else start + (input.until - datetime.now(UTC)).total_seconds()
        )
        poll = max(input.poll_seconds, 0.0)
        startup = timedelta(seconds=input.startup_timeout_seconds)
        run = input.pool_run
        previous: datetime | None = None
        last: am.WatchHealthResult | None = None
        last_error: ProviderError | None = None
        own_read_at: float | None = None  # monotonic time of this watch's last provider read
        wanted = _StillWanted()
        while True:
            await wanted.check()  # before the provider is listed for nobody
            fresh = input.once or (until is not None and time.monotonic() >= until)
            pool = await self._pool_run(run)
            run = run.model_copy(update={"first_run_id": pool.first_run_id or run.first_run_id})
            if not pool.running:
                return am.WatchHealthResult(
                    pool=pool, checked_at=datetime.now(UTC), previous_check_at=previous
                )
            found: am.WatchHealthResult | None = None
            reuse = input.reuse_listing_seconds
            if not fresh and (shared := self._shared_listing(input.account, input.pool, reuse)):
                found = _health_answer(pool, shared, startup=startup, previous=previous)
            # A change on that listing is read again before it is answered: the check
            # acts on an answer at once (a device whose clock ran out is terminated, as
            # when a pause ends), and the listing may be `reuse_listing_seconds` old: a
            # device back since then would go.
            confirm = found is not None and found.fingerprint != input.fingerprint
            if confirm:
                found = None
            # No listing of the pool's own watch to reuse (it runs on another worker, or
            # lists less often than this watch polls): this watch's own reads keep their
            # spacing, or the pool would cost the provider a read per health poll on top
            # of its resyncs.
            put_off = (
                found is None
                and not (fresh or confirm)
                and own_read_at is not None
                and time.monotonic() - own_read_at < input.own_read_seconds
            )
            if found is None and not put_off:
                own_read_at = time.monotonic()
                try:
                    # What the check acts on at once is read now, to the last suspect.
                    # A change on a plain read of its own is read so too: a provider
                    # that keeps status answers may show one that is old.
                    read_fresh = fresh or confirm
                    while True:
                        with provider_call(fresh=read_fresh):
                            async with heartbeating():
                                listing = await self._new_listing(input.account, input.pool)
                        read = _health_answer(pool, listing, startup=startup, previous=previous)
                        if read_fresh or read.fingerprint == input.fingerprint:
                            break
                        read_fresh = True
                    last_error = None
                    found = read
                except ProviderError as exc:
                    if fresh or not exc.retryable:
                        raise to_application_error(exc) from exc
                    last_error = exc
                    activity.logger.warning(
                        "pool %s: health listing failed, will poll again: %s", input.pool, exc
                    )
            if found is not None:
                last = found
                if fresh or found.fingerprint != input.fingerprint:
                    return found
                previous = found.checked_at
            now = time.monotonic()
            if now >= deadline:
                if last is None:
                    assert last_error is not None
                    raise to_application_error(last_error) from last_error
                return last
            activity.heartbeat()
            wait = min(poll, deadline - now)
            if until is not None:
                wait = min(wait, max(until - now, 0.0))
            # Cancellation (delivered through the heartbeat) lands here as CancelledError.
            await asyncio.sleep(wait)

    async def _pool_run(self, run: am.PoolRunInput) -> am.PoolRunResult:
        """`pool_running`, where not knowing (Temporal did not answer) counts as running."""
        try:
            return await pool_runs.pool_running(activity.client(), run)
        except RPCError as err:
            activity.logger.warning("pool %s: not known if still running: %s", run.workflow_id, err)
            return am.PoolRunResult(running=True, first_run_id=run.first_run_id, status="UNKNOWN")
