"""The emulated BitBrowser account and the desktop clients (nodes) logged into it.

One `BitBrowserEmulator` holds the account's state: its browser profiles and
groups (`_profiles`), the browser processes (`_browsers`), its cloud phones
(`_phones`) and their request budget (`_phone_rate`), faults (`_faults`),
counters and the virtual clock. Each `Node` is one desktop client: the app of
each node serves the same emulator, so every node lists the same profiles and
phones, while a browser process belongs to the node that opened it.

Kept on disk (`_statefile`: a state file, or a store shared by the account's
processes), the account is shared by every emulator process started on it:
each call is a `transaction` (lock the file, read it again if another process
wrote, answer, write it), and the nodes of every process are the account's
(`nodes`; this process serves `local`). Per process: faults and each node's
open gate.

The Local API calls are the `_ROUTES`; the app only translates HTTP. Handlers
run on one event loop: each check-then-act is atomic between awaits, and the
awaits (an open's launch time, a queued open, a delayed phone call) re-check
what they rely on after waking. Those awaits are also where a transaction lets
the file go (`_unlocked`) and takes it again, re-reading what others wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from devicepool.emulator import _clock
from devicepool.emulator._clock import VirtualClock
from devicepool.emulator._problems import NOT_FOUND, ProblemError, invalid
from devicepool.emulator.bitbrowser import _envelope as text
from devicepool.emulator.bitbrowser._bodies import MAX_IDS, Page, id_list, is_int, required_id
from devicepool.emulator.bitbrowser._browsers import Process, Processes
from devicepool.emulator.bitbrowser._envelope import NO_DATA, LocalApiError
from devicepool.emulator.bitbrowser._faults import Decision, Dice, Faults
from devicepool.emulator.bitbrowser._phone_rate import PhoneRate
from devicepool.emulator.bitbrowser._phones import Phone, PhoneStore, PhoneTimes
from devicepool.emulator.bitbrowser._profiles import Group, Profile, ProfileStore
from devicepool.emulator.bitbrowser._statefile import StateFile
from devicepool.emulator.bitbrowser.config import BitBrowserConfig

__all__ = ["BitBrowserEmulator", "Node"]

Handler = Callable[["BitBrowserEmulator", "Node", dict[str, Any]], Awaitable[Any]]


def _rng(seed: int | None, purpose: str) -> random.Random:
    # Separate streams, so that for one seed ids do not shift when faults are switched on.
    return random.Random() if seed is None else random.Random(f"{seed}:{purpose}")


def _clock_from(
    saved: dict[str, Any] | None, speed: float, *, at_least: float = 0.0
) -> VirtualClock:
    """A new clock, or the saved one run on by the (wall) time since it was written."""
    if saved is None:
        return VirtualClock(speed=speed)
    clock = saved["clock"]
    since = max(0.0, time.time() - clock["wall"])
    return VirtualClock(
        speed=speed,
        start=max(at_least, clock["virtual"] + since * speed),
        epoch=datetime.fromisoformat(clock["epoch"]),
    )


def _record(item: Any) -> dict[str, Any]:
    """A flat dataclass's fields, shared, not copied (`dataclasses.asdict` deep-copies each
    fingerprint: most of a call's time once every call writes the account)."""
    return {f.name: getattr(item, f.name) for f in dataclasses.fields(item)}


def account_file(config: BitBrowserConfig) -> tuple[Path, bool] | None:
    """Where the account lives on disk, and whether it outlives its processes (None: memory)."""
    if config.state_file is not None:
        return config.state_file, True
    if config.accounts_dir is not None:
        return config.accounts_dir / f"{quote(config.account, safe='')}.json", False
    return None


@dataclass
class Node:
    """One desktop client logged into the account: its up/down switch and its open gate."""

    name: str
    up: bool = True
    # The desktop's memory: one open in flight; `queue: true` waits its turn here.
    open_gate: asyncio.Lock = field(default_factory=asyncio.Lock)


class BitBrowserEmulator:
    """The account: profiles, processes, phones, faults and ground-truth stats."""

    def __init__(self, config: BitBrowserConfig) -> None:
        self.config = config
        # The nodes this process serves; `nodes` are the account's (other processes' too).
        self.local = list(config.nodes)
        self.nodes = {name: Node(name) for name in config.nodes}
        where = account_file(config)
        self._disk: StateFile | None = None
        if where is None:
            self.clock = _clock_from(None, config.speed)
            self._new_parts()
            return
        # Raises StateFileError when the file cannot be used (a node served elsewhere, ...);
        # holds the file's lock until the account, with this process's nodes, is written.
        disk = StateFile(where[0], persistent=where[1])
        saved, first = disk.join(self.local)
        try:
            if first or saved is None:
                # The first process in starts the account; what ran on it is gone (browsers
                # do not survive a restart, nor do nodes' switches).
                self.clock = _clock_from(saved, config.speed)
                self._new_parts()
                if saved is not None:
                    self._restore(saved, running=False)
            else:
                # Joining processes already serving the account: their clock, browsers, nodes.
                self.clock = _clock_from(saved, saved["clock"].get("speed", config.speed))
                self._new_parts()
                self._restore(saved, running=True)
                for name in [n for n in self.nodes if n not in self.local]:
                    if not disk.node_alive(name):  # its process died without leaving
                        self._drop_node(name)
            disk.save(self._snapshot())
        except BaseException:
            disk.end()
            disk.leave()
            raise
        disk.end()
        self._disk = disk

    def _new_parts(self) -> None:
        seed = self.config.seed
        self._rngs = {p: _rng(seed, p) for p in ("profiles", "processes", "phones", "faults")}
        self.profiles = ProfileStore(self._rngs["profiles"])
        self.processes = Processes(self._rngs["processes"])
        self.phones = PhoneStore(
            self._rngs["phones"],
            times=PhoneTimes(
                boot=self.config.phone_boot_seconds,
                resume=self.config.phone_resume_seconds,
                restart=self.config.phone_restart_seconds,
            ),
            regions=self.config.phone_regions,
            recovers_per_month=self.config.phone_recovers_per_month,
            month_of=self._month_of,
        )
        self.phone_rate = PhoneRate()
        self.faults = Faults()
        self.dice = Dice(self._rngs["faults"])
        # creates, deletes, opens, open_failures, closes, resets, kills
        self.counters: Counter[str] = Counter()

    def reset(self) -> None:
        """Forget every profile, phone, process, counter and fault; nodes up; the clock runs on."""
        self._new_parts()
        for node in self.nodes.values():
            node.up = True

    def close(self) -> None:
        """Stop serving this process's nodes (their browsers die with them), write the account
        one last time and let its file go (a shared store's last process removes it);
        idempotent."""
        disk = self._disk
        if disk is None:
            return
        with self.transaction():
            for name in self.local:
                self._drop_node(name)
        self._disk = None
        disk.leave()

    def _drop_node(self, name: str) -> None:
        for process in self.processes.on_node(name, self.now()):
            self.processes.forget(process.profile_id)
        self.nodes.pop(name, None)

    # ------------------------------------------------------------ on disk

    @contextlib.contextmanager
    def transaction(self, *, write: bool = True) -> Iterator[None]:
        """One call on the account: with a file, under its lock, on what other processes wrote,
        and written at the end (`write`). Never held across an await but `_unlocked`'s."""
        disk = self._disk
        if disk is None:
            yield
            return
        if disk.begin():
            self._reload(disk.load())
        try:
            yield
        finally:
            if disk.held:
                try:
                    if write:
                        disk.save(self._snapshot())
                finally:
                    disk.end()

    @contextlib.contextmanager
    def _unlocked(self) -> Iterator[None]:
        """Around an await inside a transaction: write and let the file go, then take it again
        and re-read what other processes wrote meanwhile."""
        disk = self._disk
        if disk is None or not disk.held:
            yield
            return
        disk.save(self._snapshot())
        disk.end()
        try:
            yield
        finally:
            if self._disk is disk and disk.begin():
                self._reload(disk.load())

    def commit(self) -> None:
        """Write the account to its file now, if there is one."""
        with self.transaction():
            pass

    def _reload(self, saved: dict[str, Any] | None) -> None:
        if saved is None:
            return
        self.clock = _clock_from(
            saved, saved["clock"].get("speed", self.clock.speed), at_least=self.now()
        )
        self._restore(saved, running=True)

    def _snapshot(self) -> dict[str, Any]:
        rate = self.phone_rate
        return {
            "account": self.config.account,
            "clock": {
                "virtual": self.now(),
                "wall": time.time(),
                "epoch": self.clock.epoch.isoformat(),
                "speed": self.clock.speed,
            },
            # What runs now, for the account's other processes (not kept across a restart).
            "nodes": {name: node.up for name, node in self.nodes.items()},
            "processes": self.processes.records(),
            "phoneWindows": self.phone_rate.windows(),
            "profiles": [_record(p) for p in self.profiles.profiles.values()],
            "groups": [_record(g) for g in self.profiles.groups.values()],
            "nextSeq": self.profiles.next_seq,
            "phones": [_record(p) for p in self.phones.phones.values()],
            "phoneGroups": list(self.phones.groups.values()),
            "phoneNextSeq": self.phones.next_seq,
            "phoneAdb": self.phones.adb_enabled,
            "counters": dict(self.counters),
            "phoneCounters": dict(self.phones.counters),
            "phoneRate": [rate.requests, rate.rate_limited, rate.max_per_second],
            "faultsInjected": dict(self.dice.injected),
            "rng": {purpose: rng.getstate() for purpose, rng in self._rngs.items()},
        }

    def _restore(self, saved: dict[str, Any], *, running: bool) -> None:
        """The account from its file; `running`: with what runs now (browsers, nodes, the
        phone budget's windows), as another process of the account left it."""
        self.profiles.profiles = {p["id"]: Profile(**p) for p in saved["profiles"]}
        self.profiles.groups = {g["id"]: Group(**g) for g in saved["groups"]}
        self.profiles.next_seq = saved["nextSeq"]
        self.phones.phones = {p["id"]: Phone(**p) for p in saved["phones"]}
        self.phones.groups = {g["id"]: g for g in saved["phoneGroups"]}
        self.phones.next_seq = saved["phoneNextSeq"]
        self.phones.adb_enabled = bool(saved.get("phoneAdb", True))
        self.counters = Counter(saved["counters"])
        self.phones.counters = Counter(saved["phoneCounters"])
        requests, limited, most = saved["phoneRate"]
        self.phone_rate = PhoneRate(requests=requests, rate_limited=limited, max_per_second=most)
        self.dice.injected = Counter(saved["faultsInjected"])
        for purpose, (version, internal, gauss) in saved["rng"].items():
            self._rngs[purpose].setstate((version, tuple(internal), gauss))
        if not running:
            return
        self.processes.restore(saved.get("processes", []))
        if "phoneWindows" in saved:
            self.phone_rate.restore_windows(saved["phoneWindows"])
        nodes: dict[str, Node] = {}
        for name, up in saved.get("nodes", {}).items():
            nodes[name] = self.nodes.get(name) or Node(name)
            nodes[name].up = up
        for name in self.local:  # ours, whatever the file says
            nodes.setdefault(name, self.nodes.get(name) or Node(name))
        self.nodes = nodes

    def node(self, name: str) -> Node:
        node = self.nodes.get(name)
        if node is None:
            raise ProblemError(404, NOT_FOUND, f"no node {name!r}; nodes: {sorted(self.nodes)}")
        return node

    # ------------------------------------------------------------ the clock

    def now(self) -> float:
        return self.clock.now()

    def stamp(self) -> str:
        """A time as the vendor writes it: `2024-12-25 10:29:06`."""
        return (self.clock.epoch + timedelta(seconds=self.now())).strftime("%Y-%m-%d %H:%M:%S")

    def _month_of(self, t: float) -> str:
        return (self.clock.epoch + timedelta(seconds=t)).strftime("%Y-%m")

    async def pause(self, real_seconds: float) -> None:
        """An injected latency inside a call (real seconds; 0 still lets other calls run)."""
        with self._unlocked():
            await asyncio.sleep(real_seconds)

    async def sleep(self, virtual_seconds: float) -> None:
        if virtual_seconds > 0:
            with self._unlocked():
                await asyncio.sleep(self.clock.to_real_seconds(virtual_seconds))

    # ------------------------------------------------------- the Local API

    def authenticate(self, key: str | None) -> None:
        if self.config.api_key is None:
            return
        if not key:
            raise LocalApiError(text.AUTH_MISSING, status=self.config.auth_refusal_status)
        if key != self.config.api_key:
            raise LocalApiError(text.AUTH_WRONG, status=self.config.auth_refusal_status)

    def draw_faults(self) -> Decision:
        return self.dice.decide(self.faults)

    async def call(self, node: Node, path: str, body: dict[str, Any]) -> Any:
        """One Local API call on `node`: its data (or NO_DATA), or a LocalApiError."""
        handler = _ROUTES.get(path.rstrip("/") or "/")
        if handler is None:
            raise LocalApiError(text.NO_SUCH_PATH, status=404)
        if path.startswith("/phone/"):
            await self._phone_budget(node)
        return await handler(self, node, body)

    async def _phone_budget(self, node: Node) -> None:
        scope = "account" if self.config.phone_rate_scope == "account" else node.name
        limit = self.phone_limit()
        mode = self.config.phone_rate_mode
        now = self.now()
        self.phone_rate.arrive(scope, now)
        wait = self.phone_rate.admit(scope, now, limit, wait=mode == "delay")
        if wait is None:
            raise LocalApiError(
                text.PHONE_RATE_LIMITED.format(limit=limit),
                status=429 if mode == "http429" else 200,
                headers={"Retry-After": "1"} if mode == "http429" else None,
            )
        await self.sleep(wait)

    def phone_limit(self) -> int:
        return self.faults.phone_requests_per_second or self.config.phone_requests_per_second

    # ---------------------------------------------------- browser profiles

    async def health(self, node: Node, body: dict[str, Any]) -> Any:
        return NO_DATA

    async def update(self, node: Node, body: dict[str, Any]) -> Any:
        profile_id = body.get("id")
        if profile_id in (None, ""):
            profile = self.profiles.create(body, self.stamp())
            self.counters["creates"] += 1
        else:
            profile = self.profiles.replace(self.profiles.get(profile_id), body, self.stamp())
        return profile.to_json()

    async def update_partial(self, node: Node, body: dict[str, Any]) -> Any:
        ids = id_list(body, limit=None)
        profiles = [self.profiles.get(i) for i in ids]
        self.profiles.update_partial(profiles, body, self.stamp())
        return NO_DATA

    async def detail(self, node: Node, body: dict[str, Any]) -> Any:
        return self.profiles.get(required_id(body)).to_json()

    async def list_profiles(self, node: Node, body: dict[str, Any]) -> Any:
        return self.profiles.listing(body)

    async def open_browser(self, node: Node, body: dict[str, Any]) -> Any:
        profile_id = required_id(body)
        profile = self.profiles.get(profile_id)
        running = self._openable(profile.id, node)
        if running is not None:
            return running.open_json(profile.to_json())
        if node.open_gate.locked():
            if body.get("queue") is not True:
                raise LocalApiError(text.OPEN_IN_FLIGHT)
            with self._unlocked():
                await node.open_gate.acquire()
        else:
            await node.open_gate.acquire()  # free: taken without suspending
        try:
            return await self._open_in_turn(node, profile_id)
        finally:
            node.open_gate.release()

    async def _open_in_turn(self, node: Node, profile_id: str) -> Any:
        # Re-read after waiting our turn: deleted, or opened by a call queued before ours?
        profile = self.profiles.get(profile_id)
        running = self._openable(profile.id, node)
        if running is not None:
            return running.open_json(profile.to_json())
        core = str(profile.fields["browserFingerPrint"].get("coreVersion", "130"))
        launched = self.processes.start_opening(profile.id, node.name, core)
        await self.sleep(self.config.open_seconds)
        outcome = self.dice.open_outcome(self.faults)
        # The record as it is now: another process of the account may have rewritten it
        # meanwhile, so the same launch is known by its ws path, not by identity.
        process = self.processes.get(profile.id, self.now())
        if process is None or process.ws_path != launched.ws_path or not node.up:
            outcome = "failed"  # reset, killed or node down while launching
        if outcome == "failed":
            if process is not None and process.ws_path == launched.ws_path:
                self.processes.forget(profile.id)
            self.counters["open_failures"] += 1
            raise LocalApiError(text.OPEN_FAILED)
        assert process is not None
        if outcome == "stuck":
            process.alive = False
            self.counters["open_failures"] += 1
            raise LocalApiError(text.OPEN_TIMED_OUT)
        process.state = "open"
        self.counters["opens"] += 1
        opened = self.profiles.get(profile_id)
        opened.opened()
        return process.open_json(opened.to_json())

    def _openable(self, profile_id: str, node: Node) -> Process | None:
        """The live process if the profile is open on `node`; refuse if it cannot be opened."""
        process = self.processes.get(profile_id, self.now())
        if process is None:
            return None
        if process.node != node.name:
            raise LocalApiError(text.OPEN_ELSEWHERE)
        if process.state == "opening":
            raise LocalApiError(text.OPENING)
        if process.state == "closing":
            raise LocalApiError(text.CLOSING)
        return process

    async def close_browser(self, node: Node, body: dict[str, Any]) -> Any:
        profile = self.profiles.get(required_id(body))
        process = self.processes.get(profile.id, self.now())
        if process is None or process.state == "closing":
            return NO_DATA
        if process.node != node.name:
            raise LocalApiError(text.OPEN_ELSEWHERE)
        if process.state == "opening":
            raise LocalApiError(text.OPENING)
        self._close_process(process)
        return NO_DATA

    def _close_process(self, process: Process) -> None:
        # Success now; the process exits a moment later (pids/alive shows it until then).
        process.state = "closing"
        process.exits_at = self.now() + self.config.close_linger_seconds
        self.counters["closes"] += 1

    async def close_all(self, node: Node, body: dict[str, Any]) -> Any:
        for process in self.processes.on_node(node.name, self.now()):
            if process.state == "open":
                self._close_process(process)
        return NO_DATA

    async def close_by_seqs(self, node: Node, body: dict[str, Any]) -> Any:
        seqs = body.get("seqs")
        if not isinstance(seqs, list) or not seqs or not all(is_int(s) for s in seqs):
            raise LocalApiError(f"seqs {text.BAD_FIELD}")
        ids = {p.id for p in self.profiles.profiles.values() if p.seq in seqs}
        for process in self.processes.on_node(node.name, self.now()):
            if process.state == "open" and process.profile_id in ids:
                self._close_process(process)
        return NO_DATA

    async def proxy_update(self, node: Node, body: dict[str, Any]) -> Any:
        profiles = [self.profiles.get(i) for i in id_list(body, limit=None)]
        if "proxyMethod" not in body:
            raise LocalApiError(text.PROXY_METHOD_REQUIRED)
        self.profiles.update_partial(profiles, body, self.stamp())
        return NO_DATA

    async def closing_reset(self, node: Node, body: dict[str, Any]) -> Any:
        profile = self.profiles.get(required_id(body))
        if self.processes.get(profile.id, self.now()) is not None:
            self.processes.forget(profile.id)
            self.counters["resets"] += 1
        return NO_DATA

    def _check_deletable(self, profile: Profile) -> None:
        process = self.processes.get(profile.id, self.now())
        if process is not None:
            raise LocalApiError(text.CLOSING if process.state == "closing" else text.IN_USE)

    async def delete(self, node: Node, body: dict[str, Any]) -> Any:
        profile = self.profiles.get(required_id(body))
        self._check_deletable(profile)
        self.profiles.delete(profile)
        self.counters["deletes"] += 1
        return NO_DATA

    async def delete_ids(self, node: Node, body: dict[str, Any]) -> Any:
        ids = id_list(body, limit=MAX_IDS)
        # All or nothing; ids of profiles already gone are skipped.
        profiles = [p for i in ids if (p := self.profiles.profiles.get(i)) is not None]
        for profile in profiles:
            self._check_deletable(profile)
        for profile in profiles:
            self.profiles.delete(profile)
        self.counters["deletes"] += len(profiles)
        return NO_DATA

    def _pids(self, node: Node, ids: list[str] | None, *, alive: bool) -> dict[str, int]:
        return {
            p.profile_id: p.pid
            for p in self.processes.on_node(node.name, self.now())
            if p.state != "opening"
            and (ids is None or p.profile_id in ids)
            and (p.alive or not alive)
        }

    async def pids(self, node: Node, body: dict[str, Any]) -> Any:
        # Not checked against the processes: a dead browser's stale pid stays listed.
        return self._pids(node, id_list(body, limit=None), alive=False)

    async def pids_alive(self, node: Node, body: dict[str, Any]) -> Any:
        return self._pids(node, id_list(body, limit=None), alive=True)

    async def pids_all(self, node: Node, body: dict[str, Any]) -> Any:
        return self._pids(node, None, alive=True)

    async def ports(self, node: Node, body: dict[str, Any]) -> Any:
        return {
            p.profile_id: str(p.port)
            for p in self.processes.on_node(node.name, self.now())
            if p.state == "open" and p.alive
        }

    async def group_add(self, node: Node, body: dict[str, Any]) -> Any:
        return self.profiles.add_group(body).to_json()

    async def group_list(self, node: Node, body: dict[str, Any]) -> Any:
        return self.profiles.list_groups(Page.parse(body))

    async def group_detail(self, node: Node, body: dict[str, Any]) -> Any:
        group = self.profiles.groups.get(required_id(body, text.GROUP_NOT_FOUND))
        if group is None:
            raise LocalApiError(text.GROUP_NOT_FOUND)
        return group.to_json()

    async def browser_group_update(self, node: Node, body: dict[str, Any]) -> Any:
        profiles = [self.profiles.get(i) for i in id_list(body, "browserIds", limit=None)]
        if not isinstance(body.get("groupId"), str) or body["groupId"] not in self.profiles.groups:
            raise LocalApiError(text.GROUP_NOT_FOUND)
        self.profiles.update_partial(profiles, {"groupId": body["groupId"]}, self.stamp())
        return NO_DATA

    async def browser_remark_update(self, node: Node, body: dict[str, Any]) -> Any:
        profiles = [self.profiles.get(i) for i in id_list(body, "browserIds", limit=None)]
        if not isinstance(body.get("remark"), str):
            raise LocalApiError(f"remark {text.BAD_FIELD}")
        self.profiles.update_partial(profiles, {"remark": body["remark"]}, self.stamp())
        return NO_DATA

    # --------------------------------------------------------- cloud phones

    async def phone_add(self, node: Node, body: dict[str, Any]) -> Any:
        return self.phones.add(body, self.now(), self.stamp()).to_json()

    async def phone_update(self, node: Node, body: dict[str, Any]) -> Any:
        phone = self.phones.get(body, self.now())
        return self.phones.update(phone, body, self.stamp()).to_json()

    async def phone_list(self, node: Node, body: dict[str, Any]) -> Any:
        return self.phones.listing(body, self.now())

    async def phone_open(self, node: Node, body: dict[str, Any]) -> Any:
        self.phones.open(self.phones.get(body, self.now()), self.now())
        return NO_DATA

    async def phone_running(self, node: Node, body: dict[str, Any]) -> Any:
        return self.phones.get(body, self.now()).running()

    async def phone_suspend(self, node: Node, body: dict[str, Any]) -> Any:
        self.phones.suspend(self.phones.get(body, self.now()))
        return NO_DATA

    async def phone_shutdown(self, node: Node, body: dict[str, Any]) -> Any:
        self.phones.shutdown(self.phones.get(body, self.now()), self.now())
        return NO_DATA

    async def phone_restart(self, node: Node, body: dict[str, Any]) -> Any:
        self.phones.restart(self.phones.get(body, self.now()), self.now())
        return NO_DATA

    async def phone_recover(self, node: Node, body: dict[str, Any]) -> Any:
        self.phones.recover(self.phones.get(body, self.now()), self.now())
        return NO_DATA

    async def phone_group_list(self, node: Node, body: dict[str, Any]) -> Any:
        return self.phones.list_groups(body)

    async def phone_group_add(self, node: Node, body: dict[str, Any]) -> Any:
        return self.phones.add_group(body)

    async def phone_group_edit(self, node: Node, body: dict[str, Any]) -> Any:
        return self.phones.edit_group(body)

    async def phone_group_delete(self, node: Node, body: dict[str, Any]) -> Any:
        self.phones.delete_group(body)
        return NO_DATA

    async def phone_batch_remark(self, node: Node, body: dict[str, Any]) -> Any:
        phones = self.phones.phones_of(body)
        remark = body.get("remark")
        if not isinstance(remark, str):
            raise LocalApiError(f"remark {text.BAD_FIELD}")
        append = body.get("remarkType") == 2
        for phone in phones:
            new = phone.fields["remark"] + remark if append else remark
            self.phones.update(phone, {"remark": new}, self.stamp())
        return NO_DATA

    async def phone_batch_group(self, node: Node, body: dict[str, Any]) -> Any:
        phones = self.phones.phones_of(body)
        if not isinstance(body.get("groupId"), str) or body["groupId"] not in self.phones.groups:
            raise LocalApiError(text.GROUP_NOT_FOUND)
        for phone in phones:
            self.phones.update(phone, {"groupId": body["groupId"]}, self.stamp())
        return NO_DATA

    async def phone_batch_proxy(self, node: Node, body: dict[str, Any]) -> Any:
        phones = self.phones.phones_of(body)
        keys = ("host", "port", "proxyUserName", "proxyPassword")
        change = {k: body.get(k) for k in keys}
        for phone in phones:
            self.phones.update(phone, change, self.stamp())
        return NO_DATA

    # ------------------------------------------------------- control plane

    def set_node_up(self, node: Node, up: Any) -> dict[str, Any]:
        if not isinstance(up, bool):
            raise invalid('body must be {"up": true|false}')
        if node.up and not up:
            # The desktop client is gone, and its browsers with it.
            for process in self.processes.on_node(node.name, self.now()):
                self.processes.forget(process.profile_id)
        node.up = up
        return self.node_json(node)

    def node_json(self, node: Node) -> dict[str, Any]:
        return {
            "name": node.name,
            "up": node.up,
            "open": len(self.processes.on_node(node.name, self.now())),
        }

    def kill(self, profile_id: str, body: Any) -> dict[str, Any]:
        stuck = body.get("stuck", False) if isinstance(body, dict) else None
        if not isinstance(stuck, bool) or set(body) - {"stuck"}:
            raise invalid('body is {} or {"stuck": true|false}')
        process = self.processes.get(profile_id, self.now())
        if process is None or not process.alive:
            raise ProblemError(
                404, NOT_FOUND, f"no live browser process for profile {profile_id!r}"
            )
        self.counters["kills"] += 1
        if stuck:
            process.alive = False
            process.state = "closing"
            process.exits_at = None
        else:
            self.processes.forget(profile_id)
        return {"id": profile_id, "node": process.node, "pid": process.pid, "stuck": stuck}

    def set_phone_offline(self, phone_id: str, offline: bool) -> dict[str, Any]:
        phone = self.phones.phones.get(phone_id)
        if phone is None:
            raise ProblemError(404, NOT_FOUND, f"no cloud phone {phone_id!r}")
        self.phones.settle(phone, self.now())
        phone.offline = offline
        self.phones.settle(phone, self.now())
        return {"id": phone.id, "offline": phone.offline, "running": phone.running()}

    def adb_json(self) -> dict[str, Any]:
        return {"enabled": self.phones.adb_enabled}

    def set_adb(self, body: Any) -> dict[str, Any]:
        """`POST /_emulator/adb {"enabled": bool}`: ADB on or off for the environment."""
        enabled = body.get("enabled") if isinstance(body, dict) else None
        if not isinstance(enabled, bool):
            raise invalid('body is {"enabled": true|false}')
        self.phones.adb_enabled = enabled
        return self.adb_json()

    def set_faults(self, body: Any) -> dict[str, Any]:
        self.faults = Faults.parse(body)
        return self.faults.to_json()

    def clock_json(self) -> dict[str, Any]:
        return _clock.clock_json(self.clock)

    def set_clock(self, body: Any) -> dict[str, Any]:
        return _clock.set_clock(self.clock, body)

    def secrets(self) -> list[str]:
        """Every secret a list or detail answer would carry now (for leak checks)."""
        found = [s for p in self.profiles.profiles.values() for s in p.secrets()]
        found += [s for p in self.phones.phones.values() for s in p.secrets()]
        return sorted(set(found))

    def stats(self) -> dict[str, Any]:
        now = self.now()
        processes = self.processes.settled(now)
        phones: list[Phone] = [self.phones.settle(p, now) for p in self.phones.phones.values()]
        open_by_node = {
            name: sum(1 for p in processes if p.node == name and p.state == "open")
            for name in self.nodes
        }
        counters, phone_counters = self.counters, self.phones.counters
        return {
            "profiles": {
                "total": len(self.profiles.profiles),
                "open": sum(open_by_node.values()),
                "opening": sum(1 for p in processes if p.state == "opening"),
                "closing": sum(1 for p in processes if p.state == "closing"),
                "openByNode": open_by_node,
            },
            "creates": counters["creates"],
            "deletes": counters["deletes"],
            "opens": counters["opens"],
            "openFailures": counters["open_failures"],
            "closes": counters["closes"],
            "resets": counters["resets"],
            "kills": counters["kills"],
            "duplicates": {
                "byName": self.profiles.duplicates("name"),
                "byRemark": self.profiles.duplicates("remark"),
            },
            "nodes": {name: node.up for name, node in self.nodes.items()},
            "phones": {
                "profiles": len(phones),
                "running": sum(1 for p in phones if p.running()),
                "booting": sum(1 for p in phones if p.power == "booting"),
                "suspended": sum(1 for p in phones if p.power == "suspended"),
                "offline": sum(1 for p in phones if p.offline),
                "created": phone_counters["created"],
                "powerOns": phone_counters["power_ons"],
                "shutdowns": phone_counters["shutdowns"],
                "recovers": phone_counters["recovers"],
                "requests": self.phone_rate.requests,
                "rateLimited": self.phone_rate.rate_limited,
                "maxRequestsPerSecond": self.phone_rate.max_per_second,
                "hoursBilled": round(sum(p.billed(now) for p in phones) / 3600, 4),
            },
            "secrets": {"live": len(self.secrets())},
            "faultsInjected": dict(sorted(self.dice.injected.items())),
            "account": self.config.account,
        }


_ROUTES: dict[str, Handler] = {
    "/health": BitBrowserEmulator.health,
    "/browser/update": BitBrowserEmulator.update,
    "/browser/update/partial": BitBrowserEmulator.update_partial,
    "/browser/detail": BitBrowserEmulator.detail,
    "/browser/list": BitBrowserEmulator.list_profiles,
    "/browser/open": BitBrowserEmulator.open_browser,
    "/browser/close": BitBrowserEmulator.close_browser,
    "/browser/close/all": BitBrowserEmulator.close_all,
    "/browser/close/byseqs": BitBrowserEmulator.close_by_seqs,
    "/browser/proxy/update": BitBrowserEmulator.proxy_update,
    "/browser/closing/reset": BitBrowserEmulator.closing_reset,
    "/browser/delete": BitBrowserEmulator.delete,
    "/browser/delete/ids": BitBrowserEmulator.delete_ids,
    "/browser/pids": BitBrowserEmulator.pids,
    "/browser/pids/alive": BitBrowserEmulator.pids_alive,
    "/browser/pids/all": BitBrowserEmulator.pids_all,
    "/browser/ports": BitBrowserEmulator.ports,
    "/browser/group/update": BitBrowserEmulator.browser_group_update,
    "/browser/remark/update": BitBrowserEmulator.browser_remark_update,
    "/group/add": BitBrowserEmulator.group_add,
    "/group/list": BitBrowserEmulator.group_list,
    "/group/detail": BitBrowserEmulator.group_detail,
    "/phone/profile/add": BitBrowserEmulator.phone_add,
    "/phone/profile/update": BitBrowserEmulator.phone_update,
    "/phone/list": BitBrowserEmulator.phone_list,
    "/phone/openphone": BitBrowserEmulator.phone_open,
    "/phone/running": BitBrowserEmulator.phone_running,
    "/phone/suspend": BitBrowserEmulator.phone_suspend,
    "/phone/shutdown": BitBrowserEmulator.phone_shutdown,
    "/phone/restart": BitBrowserEmulator.phone_restart,
    "/phone/profile/recover": BitBrowserEmulator.phone_recover,
    "/phone/group/list": BitBrowserEmulator.phone_group_list,
    "/phone/group/add": BitBrowserEmulator.phone_group_add,
    "/phone/group/edit": BitBrowserEmulator.phone_group_edit,
    "/phone/group/delete": BitBrowserEmulator.phone_group_delete,
    "/phone/batchUpdate/remark": BitBrowserEmulator.phone_batch_remark,
    "/phone/batchUpdate/group": BitBrowserEmulator.phone_batch_group,
    "/phone/batchUpdate": BitBrowserEmulator.phone_batch_proxy,
}

ROUTES = tuple(_ROUTES)
