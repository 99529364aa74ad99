"""The Local API's browser profile and group calls (`/browser/*`, `/group/*`, `/health`).

Each is `handler(emulator, node, body)`, routed by `state._ROUTES` (`BitBrowserEmulator.call`),
inside the call's transaction. An open takes launch time and waits its node's open gate; the
awaits let the account's file go (`BitBrowserEmulator.unlocked`), so what an open relies on is
read again after each. What they reproduce of the vendor's: docs/bitbrowser-emulator.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from devicepool.emulator.bitbrowser import _envelope as text
from devicepool.emulator.bitbrowser._bodies import MAX_IDS, Page, id_list, is_int, required_id
from devicepool.emulator.bitbrowser._browsers import Process
from devicepool.emulator.bitbrowser._envelope import NO_DATA, LocalApiError
from devicepool.emulator.bitbrowser._profiles import Profile

if TYPE_CHECKING:
    from devicepool.emulator.bitbrowser.state import BitBrowserEmulator, Node


async def health(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    return NO_DATA


async def update(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    profile_id = body.get("id")
    if profile_id in (None, ""):
        profile = em.profiles.create(body, em.stamp())
        em.counters["creates"] += 1
    else:
        profile = em.profiles.replace(em.profiles.get(profile_id), body, em.stamp())
    return profile.to_json()


async def update_partial(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    ids = id_list(body, limit=None)
    profiles = [em.profiles.get(i) for i in ids]
    em.profiles.update_partial(profiles, body, em.stamp())
    return NO_DATA


async def detail(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    return em.profiles.get(required_id(body)).to_json()


async def list_profiles(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    return em.profiles.listing(body)


async def open_browser(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    profile_id = required_id(body)
    profile = em.profiles.get(profile_id)
    running = _openable(em, profile.id, node)
    if running is not None:
        return running.open_json(profile.to_json())
    if node.open_gate.locked():
        if body.get("queue") is not True:
            raise LocalApiError(text.OPEN_IN_FLIGHT)
        with em.unlocked():
            await node.open_gate.acquire()
    else:
        await node.open_gate.acquire()  # free: taken without suspending
    try:
        return await _open_in_turn(em, node, profile_id)
    finally:
        node.open_gate.release()


async def _open_in_turn(em: BitBrowserEmulator, node: Node, profile_id: str) -> Any:
    # Re-read after waiting our turn: deleted, or opened by a call queued before ours?
    profile = em.profiles.get(profile_id)
    running = _openable(em, profile.id, node)
    if running is not None:
        return running.open_json(profile.to_json())
    core = str(profile.fields["browserFingerPrint"].get("coreVersion", "130"))
    launched = em.processes.start_opening(profile.id, node.name, core)
    await em.sleep(em.config.open_seconds)
    outcome = em.dice.open_outcome(em.faults)
    # The record as it is now: another process of the account may have rewritten it
    # meanwhile, so the same launch is known by its ws path, not by identity.
    process = em.processes.get(profile.id, em.now())
    if process is None or process.ws_path != launched.ws_path or not node.up:
        outcome = "failed"  # reset, killed or node down while launching
    if outcome == "failed":
        if process is not None and process.ws_path == launched.ws_path:
            em.processes.forget(profile.id)
        em.counters["open_failures"] += 1
        raise LocalApiError(text.OPEN_FAILED)
    assert process is not None
    if outcome == "stuck":
        process.alive = False
        em.counters["open_failures"] += 1
        raise LocalApiError(text.OPEN_TIMED_OUT)
    process.state = "open"
    em.counters["opens"] += 1
    opened = em.profiles.get(profile_id)
    opened.opened()
    return process.open_json(opened.to_json())


def _openable(em: BitBrowserEmulator, profile_id: str, node: Node) -> Process | None:
    """The live process if the profile is open on `node`; refuse if it cannot be opened."""
    process = em.processes.get(profile_id, em.now())
    if process is None:
        return None
    if process.node != node.name:
        raise LocalApiError(text.OPEN_ELSEWHERE)
    if process.state == "opening":
        raise LocalApiError(text.OPENING)
    if process.state == "closing":
        raise LocalApiError(text.CLOSING)
    return process


async def close_browser(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    profile = em.profiles.get(required_id(body))
    process = em.processes.get(profile.id, em.now())
    if process is None or process.state == "closing":
        return NO_DATA
    if process.node != node.name:
        raise LocalApiError(text.OPEN_ELSEWHERE)
    if process.state == "opening":
        raise LocalApiError(text.OPENING)
    _close_process(em, process)
    return NO_DATA


def _close_process(em: BitBrowserEmulator, process: Process) -> None:
    # Success now; the process exits a moment later (pids/alive shows it until then).
    process.state = "closing"
    process.exits_at = em.now() + em.config.close_linger_seconds
    em.counters["closes"] += 1


async def close_all(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    for process in em.processes.on_node(node.name, em.now()):
        if process.state == "open":
            _close_process(em, process)
    return NO_DATA


async def close_by_seqs(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    seqs = body.get("seqs")
    if not isinstance(seqs, list) or not seqs or not all(is_int(s) for s in seqs):
        raise LocalApiError(f"seqs {text.BAD_FIELD}")
    ids = {p.id for p in em.profiles.profiles.values() if p.seq in seqs}
    for process in em.processes.on_node(node.name, em.now()):
        if process.state == "open" and process.profile_id in ids:
            _close_process(em, process)
    return NO_DATA


async def proxy_update(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    profiles = [em.profiles.get(i) for i in id_list(body, limit=None)]
    if "proxyMethod" not in body:
        raise LocalApiError(text.PROXY_METHOD_REQUIRED)
    em.profiles.update_partial(profiles, body, em.stamp())
    return NO_DATA


async def closing_reset(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    profile = em.profiles.get(required_id(body))
    if em.processes.get(profile.id, em.now()) is not None:
        em.processes.forget(profile.id)
        em.counters["resets"] += 1
    return NO_DATA


def _check_deletable(em: BitBrowserEmulator, profile: Profile) -> None:
    process = em.processes.get(profile.id, em.now())
    if process is not None:
        raise LocalApiError(text.CLOSING if process.state == "closing" else text.IN_USE)


async def delete(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    profile = em.profiles.get(required_id(body))
    _check_deletable(em, profile)
    em.profiles.delete(profile)
    em.counters["deletes"] += 1
    return NO_DATA


async def delete_ids(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    ids = id_list(body, limit=MAX_IDS)
    # All or nothing; ids of profiles already gone are skipped.
    profiles = [p for i in ids if (p := em.profiles.profiles.get(i)) is not None]
    for profile in profiles:
        _check_deletable(em, profile)
    for profile in profiles:
        em.profiles.delete(profile)
    em.counters["deletes"] += len(profiles)
    return NO_DATA


def _pids(
    em: BitBrowserEmulator, node: Node, ids: list[str] | None, *, alive: bool
) -> dict[str, int]:
    return {
        p.profile_id: p.pid
        for p in em.processes.on_node(node.name, em.now())
        if p.state != "opening" and (ids is None or p.profile_id in ids) and (p.alive or not alive)
    }


async def pids(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    # Not checked against the processes: a dead browser's stale pid stays listed.
    return _pids(em, node, id_list(body, limit=None), alive=False)


async def pids_alive(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    return _pids(em, node, id_list(body, limit=None), alive=True)


async def pids_all(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    return _pids(em, node, None, alive=True)


async def ports(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    return {
        p.profile_id: str(p.port)
        for p in em.processes.on_node(node.name, em.now())
        if p.state == "open" and p.alive
    }


async def group_add(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    return em.profiles.add_group(body).to_json()


async def group_list(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    return em.profiles.list_groups(Page.parse(body))


async def group_detail(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    group = em.profiles.groups.get(required_id(body, text.GROUP_NOT_FOUND))
    if group is None:
        raise LocalApiError(text.GROUP_NOT_FOUND)
    return group.to_json()


async def browser_group_update(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    profiles = [em.profiles.get(i) for i in id_list(body, "browserIds", limit=None)]
    if not isinstance(body.get("groupId"), str) or body["groupId"] not in em.profiles.groups:
        raise LocalApiError(text.GROUP_NOT_FOUND)
    em.profiles.update_partial(profiles, {"groupId": body["groupId"]}, em.stamp())
    return NO_DATA


async def browser_remark_update(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    profiles = [em.profiles.get(i) for i in id_list(body, "browserIds", limit=None)]
    if not isinstance(body.get("remark"), str):
        raise LocalApiError(f"remark {text.BAD_FIELD}")
    em.profiles.update_partial(profiles, {"remark": body["remark"]}, em.stamp())
    return NO_DATA
