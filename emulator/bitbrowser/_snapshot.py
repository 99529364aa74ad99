"""The account as its file holds it: `snapshot` writes it out, `restore` reads it back.

What `_statefile` keeps under its lock for every process of the account (`account_file`: where):
profiles, groups, phones, counters, the random streams and the clock (`clock_from` runs a saved
clock on by the time since); with what runs now (browser processes, nodes' switches, the phone
budget's windows) for the account's other processes, not across a restart.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from devicepool.emulator._base import rng_state
from devicepool.emulator._clock import clock_record
from devicepool.emulator.bitbrowser._phone_rate import PhoneRate
from devicepool.emulator.bitbrowser._phones import Phone
from devicepool.emulator.bitbrowser._profiles import Group, Profile
from devicepool.emulator.bitbrowser.config import BitBrowserConfig

if TYPE_CHECKING:
    from devicepool.emulator.bitbrowser.state import BitBrowserEmulator


def account_file(config: BitBrowserConfig) -> tuple[Path, bool] | None:
    """Where the account lives on disk, and whether it outlives its processes (None: memory)."""
    if config.state_file is not None:
        return config.state_file, True
    if config.accounts_dir is not None:
        return config.accounts_dir / f"{quote(config.account, safe='')}.json", False
    return None


def snapshot(em: BitBrowserEmulator) -> dict[str, Any]:
    """The account as its file keeps it (and the account's other processes read it)."""
    rate = em.phone_rate
    return {
        "account": em.config.account,
        "clock": {**clock_record(em.clock), "speed": em.clock.speed},
        # What runs now, for the account's other processes (not kept across a restart).
        "nodes": {name: node.up for name, node in em.nodes.items()},
        "processes": em.processes.records(),
        "phoneWindows": em.phone_rate.windows(),
        "profiles": [_record(p) for p in em.profiles.profiles.values()],
        "groups": [_record(g) for g in em.profiles.groups.values()],
        "nextSeq": em.profiles.next_seq,
        "phones": [_record(p) for p in em.phones.phones.values()],
        "phoneGroups": list(em.phones.groups.values()),
        "phoneNextSeq": em.phones.next_seq,
        "phoneAdb": em.phones.adb_enabled,
        "counters": dict(em.counters),
        "phoneCounters": dict(em.phones.counters),
        "phoneRate": [rate.requests, rate.rate_limited, rate.max_per_second],
        "faultsInjected": dict(em.dice.injected),
        "rng": {purpose: rng.getstate() for purpose, rng in em.rngs.items()},
    }


def restore(em: BitBrowserEmulator, saved: dict[str, Any], *, running: bool) -> None:
    """The account from its file; `running`: with what runs now (browsers, nodes, the
    phone budget's windows), as another process of the account left it."""
    from devicepool.emulator.bitbrowser.state import Node  # state imports this module

    em.profiles.profiles = {p["id"]: Profile(**p) for p in saved["profiles"]}
    em.profiles.groups = {g["id"]: Group(**g) for g in saved["groups"]}
    em.profiles.next_seq = saved["nextSeq"]
    em.phones.phones = {p["id"]: Phone(**p) for p in saved["phones"]}
    em.phones.groups = {g["id"]: g for g in saved["phoneGroups"]}
    em.phones.next_seq = saved["phoneNextSeq"]
    em.phones.adb_enabled = bool(saved.get("phoneAdb", True))
    em.counters = Counter(saved["counters"])
    em.phones.counters = Counter(saved["phoneCounters"])
    requests, limited, most = saved["phoneRate"]
    em.phone_rate = PhoneRate(requests=requests, rate_limited=limited, max_per_second=most)
    em.dice.injected = Counter(saved["faultsInjected"])
    for purpose, state in saved["rng"].items():
        em.rngs[purpose].setstate(rng_state(state))
    if not running:
        return
    em.processes.restore(saved.get("processes", []))
    if "phoneWindows" in saved:
        em.phone_rate.restore_windows(saved["phoneWindows"])
    nodes: dict[str, Node] = {}
    for name, up in saved.get("nodes", {}).items():
        nodes[name] = em.nodes.get(name) or Node(name)
        nodes[name].up = up
    for name in em.local:  # ours, whatever the file says
        nodes.setdefault(name, em.nodes.get(name) or Node(name))
    em.nodes = nodes


def _record(item: Any) -> dict[str, Any]:
    """A flat dataclass's fields, shared, not copied (`dataclasses.asdict` deep-copies each
    fingerprint: most of a call's time once every call writes the account)."""
    return {f.name: getattr(item, f.name) for f in dataclasses.fields(item)}
