"""The BrowserPool workflow's messages and carried state (`BrowserPoolState`, carried
whole across continue-as-new). No I/O, no Temporal; unknown fields are tolerated.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from devicepool.activities.settings import PoolSettings
from devicepool.api.base import CamelModel
from devicepool.api.browserpool.v1beta1 import BrowserPoolSpec, BrowserPoolStatus
from devicepool.api.v1alpha1 import ObjectMeta
from devicepool.workflows.reconciler.events import PoolEvent
from devicepool.workflows.reconciler.leases import LeaseBook

__all__ = ["BrowserApplyRequest", "BrowserPoolInput", "BrowserPoolState", "ProfilesView"]


class BrowserPoolState(CamelModel):
    """Everything a BrowserPool run knows that the next run needs."""

    generation: int = 1
    status: BrowserPoolStatus = Field(default_factory=BrowserPoolStatus)
    # profile id -> opens failed in a row (reset by an open that works)
    failures: dict[str, int] = Field(default_factory=dict)
    events: list[PoolEvent] = Field(default_factory=list)
    deleting: bool = False
    # Live node -> when its Local API first failed to answer a listing (gone once it
    # answers): past `nodeLostAfterSeconds` the node is counted lost.
    unreachable_since: dict[str, datetime] = Field(default_factory=dict)
    # The BitBrowser account the live selected nodes name ("" while none names one).
    account: str = ""
    # The nodes known to be of the pool's account(s): each made one of its profiles or
    # listed some lately -> the account it names ("" if none). Teardown ends only once a
    # node of each such account answers with none left (accounts.py).
    nodes: dict[str, str] = Field(default_factory=dict)
    # Of those, node -> its group: nodes that saw each other's profiles are one account,
    # named or not (accounts.py `link`); kept only for the nodes in `nodes`.
    groups: dict[str, str] = Field(default_factory=dict)
    # When the pool was first created (its first run's start), kept across runs: its age.
    created_at: datetime | None = None
    # Profiles made for a slot whose holder was on a lost node: when that node comes back,
    # its original (with the cookies) wins and the replacement goes (plan.py). Forgotten
    # once the replacement is its slot's only profile.
    replacements: list[str] = Field(default_factory=list)
    # The profiles the last pass opened: opened again at once (its browser died), the
    # next pass waits for the resync, not 2 s.
    just_opened: list[str] = Field(default_factory=list)
    # Who holds which profile, who waits for one (`reconciler/leases.py`).
    leases: LeaseBook = Field(default_factory=LeaseBook)
    # Profiles whose lease ended with `replace` (`onRelease: replace`, `release
    # --replace`): deleted, and a new one made for their slot (plan.py); forgotten once
    # no listing shows them.
    replace_after_use: list[str] = Field(default_factory=list)


class BrowserPoolInput(CamelModel):
    metadata: ObjectMeta
    spec: BrowserPoolSpec
    # None: the first task asks the worker (activity `pool_settings`).
    settings: PoolSettings | None = None
    state: BrowserPoolState | None = None


class BrowserApplyRequest(CamelModel):
    """Update `apply` of a BrowserPool: the whole spec (the name must match the pool)."""

    metadata: ObjectMeta
    spec: BrowserPoolSpec


class ProfileRow(CamelModel):
    id: str
    slot: int
    node: str
    open: bool = False
    # held (counted), lost (its node is silent), waiting (its node's Local API does not
    # answer: not counted, kept), or leaving (being deleted)
    state: str = "held"


class ProfilesView(CamelModel):
    """Query `devices` of a BrowserPool: its profiles as the last pass saw them."""

    profiles: list[ProfileRow] = Field(default_factory=list)
