"""What a cloud phone's status is: the listing's word, checked by a few `/phone/running` reads.

Listed booting or powered off is `provisioning`, suspended `offline`, running `ready`,
or `offline` once `/phone/running` says not; no session, so never `busy`. A phone this
process fresh-started for its next holder (`reset`) is `rebooting` until it runs again. How many
reads a listing makes, and what an old answer counts for: docs/providers.md, "The
cloud-phone adapter".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from devicepool.activities.device_models import (
    OFFLINE,
    PROVISIONING,
    READY,
    REBOOTING,
    DeviceInfo,
)
from devicepool.activities.providers.base import current_call
from devicepool.activities.providers.bitbrowser.models import Phone, PhoneStatus
from devicepool.activities.providers.bitbrowser.phone_marks import Remark, device_id
from devicepool.activities.providers.bitbrowser.phones import CloudPhones

__all__ = ["PROBES_PER_LISTING", "PROBE_TURNS", "PhoneReads"]

# A phone's `/phone/running` answer is trusted this many budget intervals (30 s at 1/s),
# and a listing reads at most this many (a pool of 100 would spend its budget on them).
PROBE_TURNS = 30
PROBES_PER_LISTING = 3
# A phone fresh-started for its next holder (`reset`) reads `rebooting`, not `provisioning`,
# while it boots again: the health check would take a phone booting long after its creation
# for a start that failed. Also while it is still listed running, for `RESET_SETTLE` seconds
# (the vendor's power calls are asynchronous: a listing may not show the reboot yet). Past
# `RESET_MAX` one still booting is judged as any other.
RESET_SETTLE = 30.0
RESET_MAX = 900.0


@dataclass
class _Probe:
    at: float
    running: bool
    listed: int | None


@dataclass
class _Reset:
    at: float
    booting: bool = False  # listed booting since


class PhoneReads:
    """The `/phone/running` answers one adapter keeps, and the devices its listings show."""

    def __init__(
        self,
        phones: CloudPhones,
        *,
        probe_seconds: float | None,
        probes_per_listing: int,
        clock: Callable[[], float],
    ) -> None:
        self.phones = phones
        self.probe_seconds = (
            PROBE_TURNS * phones.pacer.interval if probe_seconds is None else probe_seconds
        )
        self.probes_per_listing = probes_per_listing
        self._clock = clock
        self._probes: dict[str, _Probe] = {}
        self._resets: dict[str, _Reset] = {}

    def forget(self, phone_id: str) -> None:
        """What was read of a phone this adapter just changed (a reset's too)."""
        self._probes.pop(phone_id, None)
        self._resets.pop(phone_id, None)

    def reset(self, phone_id: str) -> None:
        """The phone was just fresh-started: `rebooting` until it runs again."""
        self._probes.pop(phone_id, None)
        self._resets[phone_id] = _Reset(self._clock())

    def resetting(self, phone_id: str) -> bool:
        """Fresh-started moments ago and not yet listed booting (a retried reset's
        first attempt went through: not asked twice)."""
        reset = self._resets.get(phone_id)
        return reset is not None and not reset.booting and self._clock() - reset.at < RESET_SETTLE

    async def probe(self, phone: Phone) -> bool:
        """`/phone/running` now (one turn of the budget), kept for the listings after."""
        running = await self.phones.running(phone.id)
        self._probes[phone.id] = _Probe(self._clock(), running, phone.status)
        return running

    async def running(self, phone: Phone, *, read: bool = True) -> bool:
        """The kept `/phone/running` answer (for the phone's listed status, less than
        `probe_seconds` old), else one read (`read`), else the listing's word (running):
        a caller whose phone is a `suspect` reads."""
        kept = self.kept(phone, self._clock())
        if kept is not None:
            return kept.running
        return await self.probe(phone) if read else True

    def kept(self, phone: Phone, now: float) -> _Probe | None:
        """The phone's `running` answer if it still counts: for its listed status, and
        less than `probe_seconds` old (an older one is due to be read again)."""
        kept = self._probes.get(phone.id)
        if kept is None or kept.listed != phone.status or now - kept.at > self.probe_seconds:
            return None
        return kept

    def suspect(self, phone: Phone) -> bool:
        """Listed running, last read not running (whatever the answer's age)."""
        kept = self._probes.get(phone.id)
        return kept is not None and kept.listed == phone.status and not kept.running

    async def info(self, phone: Phone, remark: Remark) -> DeviceInfo:
        (info,) = await self.infos([(phone, remark)])
        return info

    async def infos(
        self, found: list[tuple[Phone, Remark]], *, probe: bool = True
    ) -> list[DeviceInfo]:
        """The devices of `found`, after at most `probes_per_listing` reads of `running` (one
        while other calls wait) among the phones listed running whose answer no longer
        counts; a fresh read (`provider_call(fresh=True)`) reads every suspect again
        first. Which go first: docs/providers.md, "The cloud-phone adapter"."""
        now = self._clock()
        running = [p for p, _ in found if p.status in (PhoneStatus.RUNNING, None)]
        fresh = [p for p in running if self.suspect(p)] if probe and current_call().fresh else []
        again = {p.id for p in fresh}
        due = [p for p in running if p.id not in again and self.kept(p, now) is None]
        probes = self._probes

        def first(phone: Phone) -> tuple[bool, bool, float]:
            last = probes.get(phone.id)
            same = last is not None and last.listed == phone.status
            return (not self.suspect(phone), same, last.at if last else 0.0)

        reads = 0 if not probe else self.probes_per_listing if not self.phones.pacer.waiting else 1
        for phone in [*fresh, *sorted(due, key=first)[:reads]]:
            await self.probe(phone)
        # Seen as of the listing's start: an answer read for it counts for it.
        return [self._view(phone, remark, now) for phone, remark in found]

    def _view(self, phone: Phone, remark: Remark, now: float) -> DeviceInfo:
        status, reason = self._status(phone, now)
        return DeviceInfo(
            id=device_id(phone.id, remark.incarnation),
            status=status,
            region=phone.region_id,
            created_at=datetime.fromtimestamp(remark.started, UTC),
            reason=reason,
            labels=dict(remark.labels),
        )

    def _status(self, phone: Phone, now: float) -> tuple[str, str | None]:
        listed = phone.status
        if phone.id in self._resets and (rebooting := self._rebooting(phone, now)):
            return REBOOTING, rebooting
        if listed == PhoneStatus.BOOTING:
            return PROVISIONING, None
        if listed == PhoneStatus.OFF:
            return PROVISIONING, "powered off"
        if listed == PhoneStatus.SUSPENDED:
            return OFFLINE, "suspended (window closed, still billed)"
        kept = self.kept(phone, now)
        running = kept.running if kept is not None else None
        if running is None and self.suspect(phone):
            # Last read not running, too long ago: offline until read again (why:
            # docs/providers.md, "The cloud-phone adapter").
            running = False
        # Not read, or read too long ago: the listing's word.
        if running or (running is None and listed == PhoneStatus.RUNNING):
            return READY, None
        if listed == PhoneStatus.RUNNING:
            return OFFLINE, "powered on, not running"
        return PROVISIONING, f"listed status {listed}"

    def _rebooting(self, phone: Phone, now: float) -> str | None:
        """Why a phone fresh-started here is not up yet (None: it is, or it is judged as
        any other from now on: its memory goes)."""
        reset = self._resets[phone.id]
        age = now - reset.at
        if age <= RESET_MAX and phone.status == PhoneStatus.BOOTING:
            reset.booting = True
            return "fresh start (reset for its next holder), booting"
        if age <= RESET_SETTLE and phone.status == PhoneStatus.RUNNING and not reset.booting:
            return "fresh start (reset for its next holder) asked"
        del self._resets[phone.id]
        return None
