"""The emulated BitBrowser account and the desktop clients (nodes) logged into it.

One `BitBrowserEmulator` holds the account's state: its browser profiles and
groups (`_profiles`), the browser processes (`_browsers`), its cloud phones
(`_phones`) and their request budget (`_phone_rate`), faults (`_faults`),
counters and the virtual clock. Each `Node` is one desktop client: the app of
each node serves the same emulator, so every node lists the same profiles and
phones, while a browser process belongs to the node that opened it.

Kept on disk (`_statefile`: a state file, or a store shared by the account's
processes; what the file holds: `_snapshot`), the account is shared by every
emulator process started on it:
each call is a `transaction` (lock the file, read it again if another process
wrote, answer, write it), and the nodes of every process are the account's
(`nodes`; this process serves `local`). Per process: faults and each node's
open gate.

The Local API calls are `_profile_calls` and `_phone_calls` (the phones' request
budget too), routed by `_ROUTES`; the app only translates HTTP. Handlers
run on one event loop: each check-then-act is atomic between awaits, and the
awaits (an open's launch time, a queued open, a delayed phone call) re-check
what they rely on after waking. Those awaits are also where a transaction lets
the file go (`unlocked`) and takes it again, re-reading what others wrote.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from devicepool.emulator._base import ControlPlane, seeded_rng
from devicepool.emulator._clock import clock_from
from devicepool.emulator._problems import NOT_FOUND, ProblemError, invalid
from devicepool.emulator.bitbrowser import _envelope as text
from devicepool.emulator.bitbrowser import _phone_calls as phone
from devicepool.emulator.bitbrowser import _profile_calls as profile
from devicepool.emulator.bitbrowser._browsers import Processes
from devicepool.emulator.bitbrowser._envelope import LocalApiError
from devicepool.emulator.bitbrowser._faults import Decision, Dice, Faults
from devicepool.emulator.bitbrowser._phone_rate import PhoneRate
from devicepool.emulator.bitbrowser._phones import Phone, PhoneStore, PhoneTimes
from devicepool.emulator.bitbrowser._profiles import ProfileStore
from devicepool.emulator.bitbrowser._snapshot import account_file, restore, snapshot
from devicepool.emulator.bitbrowser._statefile import StateFile
from devicepool.emulator.bitbrowser.config import BitBrowserConfig

__all__ = ["BitBrowserEmulator", "Node"]

Handler = Callable[["BitBrowserEmulator", "Node", dict[str, Any]], Awaitable[Any]]


@dataclass
class Node:
    """One desktop client logged into the account: its up/down switch and its open gate."""

    name: str
    up: bool = True
    # The desktop's memory: one open in flight; `queue: true` waits its turn here.
    open_gate: asyncio.Lock = field(default_factory=asyncio.Lock)


class BitBrowserEmulator(ControlPlane):
    """The account: profiles, processes, phones, faults and ground-truth stats."""

    faults_type = Faults

    def __init__(self, config: BitBrowserConfig) -> None:
        self.config = config
        # The nodes this process serves; `nodes` are the account's (other processes' too).
        self.local = list(config.nodes)
        self.nodes = {name: Node(name) for name in config.nodes}
        where = account_file(config)
        self._disk: StateFile | None = None
        if where is None:
            self.clock = clock_from(None, config.speed)
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
                self.clock = clock_from(saved, config.speed)
                self._new_parts()
                if saved is not None:
                    restore(self, saved, running=False)
            else:
                # Joining processes already serving the account: their clock, browsers, nodes.
                self.clock = clock_from(saved, saved["clock"].get("speed", config.speed))
                self._new_parts()
                restore(self, saved, running=True)
                for name in [n for n in self.nodes if n not in self.local]:
                    if not disk.node_alive(name):  # its process died without leaving
                        self._drop_node(name)
            disk.save(snapshot(self))
        except BaseException:
            disk.end()
            disk.leave()
            raise
        disk.end()
        self._disk = disk

    def _new_parts(self) -> None:
        seed = self.config.seed
        self.rngs = {p: seeded_rng(seed, p) for p in ("profiles", "processes", "phones", "faults")}
        self.profiles = ProfileStore(self.rngs["profiles"])
        self.processes = Processes(self.rngs["processes"])
        self.phones = PhoneStore(
            self.rngs["phones"],
            times=PhoneTimes(
                boot=self.config.phone_boot_seconds,
                resume=self.config.phone_resume_seconds,
                restart=self.config.phone_restart_seconds,
                shutdown=self.config.phone_shutdown_seconds,
            ),
            regions=self.config.phone_regions,
            recovers_per_month=self.config.phone_recovers_per_month,
            month_of=self._month_of,
        )
        self.phone_rate = PhoneRate()
        self.faults = Faults()
        self.dice = Dice(self.rngs["faults"])
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
        and written at the end (`write`). Never held across an await but `unlocked`'s."""
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
                        disk.save(snapshot(self))
                finally:
                    disk.end()

    @contextlib.contextmanager
    def unlocked(self) -> Iterator[None]:
        """Around an await inside a transaction: write and let the file go, then take it again
        and re-read what other processes wrote meanwhile."""
        disk = self._disk
        if disk is None or not disk.held:
            yield
            return
        disk.save(snapshot(self))
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
        self.clock = clock_from(
            saved, saved["clock"].get("speed", self.clock.speed), at_least=self.now()
        )
        restore(self, saved, running=True)

    def node(self, name: str) -> Node:
        node = self.nodes.get(name)
        if node is None:
            raise ProblemError(404, NOT_FOUND, f"no node {name!r}; nodes: {sorted(self.nodes)}")
        return node

    # ------------------------------------------------------------ the clock

    def stamp(self) -> str:
        """A time as the vendor writes it: `2024-12-25 10:29:06`."""
        return (self.clock.epoch + timedelta(seconds=self.now())).strftime("%Y-%m-%d %H:%M:%S")

    def _month_of(self, t: float) -> str:
        return (self.clock.epoch + timedelta(seconds=t)).strftime("%Y-%m")

    async def pause(self, real_seconds: float) -> None:
        """An injected latency inside a call (real seconds; 0 still lets other calls run)."""
        with self.unlocked():
            await asyncio.sleep(real_seconds)

    async def sleep(self, virtual_seconds: float) -> None:
        if virtual_seconds > 0:
            with self.unlocked():
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
            await phone.budget(self, node)
        return await handler(self, node, body)

    def phone_limit(self) -> int:
        return self.faults.phone_requests_per_second or self.config.phone_requests_per_second

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
    "/health": profile.health,
    "/browser/update": profile.update,
    "/browser/update/partial": profile.update_partial,
    "/browser/detail": profile.detail,
    "/browser/list": profile.list_profiles,
    "/browser/open": profile.open_browser,
    "/browser/close": profile.close_browser,
    "/browser/close/all": profile.close_all,
    "/browser/close/byseqs": profile.close_by_seqs,
    "/browser/proxy/update": profile.proxy_update,
    "/browser/closing/reset": profile.closing_reset,
    "/browser/delete": profile.delete,
    "/browser/delete/ids": profile.delete_ids,
    "/browser/pids": profile.pids,
    "/browser/pids/alive": profile.pids_alive,
    "/browser/pids/all": profile.pids_all,
    "/browser/ports": profile.ports,
    "/browser/group/update": profile.browser_group_update,
    "/browser/remark/update": profile.browser_remark_update,
    "/group/add": profile.group_add,
    "/group/list": profile.group_list,
    "/group/detail": profile.group_detail,
    "/phone/profile/add": phone.phone_add,
    "/phone/profile/update": phone.phone_update,
    "/phone/list": phone.phone_list,
    "/phone/openphone": phone.phone_open,
    "/phone/running": phone.phone_running,
    "/phone/suspend": phone.phone_suspend,
    "/phone/shutdown": phone.phone_shutdown,
    "/phone/restart": phone.phone_restart,
    "/phone/profile/recover": phone.phone_recover,
    "/phone/group/list": phone.phone_group_list,
    "/phone/group/add": phone.phone_group_add,
    "/phone/group/edit": phone.phone_group_edit,
    "/phone/group/delete": phone.phone_group_delete,
    "/phone/batchUpdate/remark": phone.phone_batch_remark,
    "/phone/batchUpdate/group": phone.phone_batch_group,
    "/phone/batchUpdate": phone.phone_batch_proxy,
}

ROUTES = tuple(_ROUTES)
