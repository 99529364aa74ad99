"""Issue 37 check: a BrowserPool open outlasts the node's own budget for it (no server).

The node's open may take `/browser/open` (180 s with `queue: true`), then for a profile
stuck opening or closing the wait for its browser to exit, `/browser/closing/reset` and
one more open. The workflow cut it at 90 s: a slow open became a failure, and three of
them deleted the profile with its cookies. A node that is gone is found by its heartbeat,
not by that deadline; and a timed-out open is not the profile's failure.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError, TimeoutType

from devicepool.activities.node_browsers import NodeBrowserActivities
from devicepool.activities.providers.bitbrowser import BrowserProfiles, LocalApi
from devicepool.workflows.browserpool import workflow as wf


def open_budget() -> float:
    """The longest a node's `node_open_profile` may run past its semaphore, by the defaults."""
    api = LocalApi(base_url="http://127.0.0.1:54345", api_key=None)
    node = NodeBrowserActivities(BrowserProfiles(api), node="node-1")
    call = api.timeout
    open_call = node.profiles.open_timeout
    # open; wait for the browser to exit (its last `pids/alive` may straddle the deadline);
    # reset; open again.
    return open_call + node._closing_wait + call + call + open_call


def test_the_open_deadline_outlasts_the_nodes_budget_for_an_open() -> None:
    scheduled = getattr(wf, "NODE_OPEN", wf.NODE_CALL)
    assert scheduled.total_seconds() > open_budget(), (scheduled, open_budget())


def test_an_open_is_watched_by_its_heartbeat() -> None:
    beat = getattr(wf, "NODE_OPEN_HEARTBEAT", None)
    assert beat is not None and beat <= timedelta(seconds=60), beat


def _failed(cause: BaseException) -> ActivityError:
    err = ActivityError(
        "activity failed",
        scheduled_event_id=1,
        started_event_id=2,
        identity="node-1",
        activity_type="node_open_profile",
        activity_id="7",
        retry_state=None,
    )
    err.__cause__ = cause
    return err


def test_a_timed_out_or_refused_open_is_the_nodes_trouble_not_the_profiles() -> None:
    counts = wf._counts_against_profile
    timed_out = TimeoutError("timeout", type=TimeoutType.START_TO_CLOSE, last_heartbeat_details=[])
    assert not counts(_failed(timed_out))
    assert not counts(_failed(ApplicationError("key refused", type="unauthenticated")))
    assert not counts(_failed(ApplicationError("slow down", type="rate_limited")))
    assert counts(_failed(ApplicationError("browser crashed", type="server_error")))
