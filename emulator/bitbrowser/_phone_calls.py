"""The Local API's cloud phone calls (`/phone/*`), and the request budget they share.

Each is `handler(emulator, node, body)`, routed by `state._ROUTES` (`BitBrowserEmulator.call`),
inside the call's transaction, after `budget`: the account's (or the node's) requests per
second, past which a call is refused, answered 429 or delayed (`phone_rate_mode`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from devicepool.emulator.bitbrowser import _envelope as text
from devicepool.emulator.bitbrowser._envelope import NO_DATA, LocalApiError

if TYPE_CHECKING:
    from devicepool.emulator.bitbrowser.state import BitBrowserEmulator, Node


async def budget(em: BitBrowserEmulator, node: Node) -> None:
    scope = "account" if em.config.phone_rate_scope == "account" else node.name
    limit = em.phone_limit()
    mode = em.config.phone_rate_mode
    now = em.now()
    em.phone_rate.arrive(scope, now)
    wait = em.phone_rate.admit(scope, now, limit, wait=mode == "delay")
    if wait is None:
        raise LocalApiError(
            text.PHONE_RATE_LIMITED.format(limit=limit),
            status=429 if mode == "http429" else 200,
            headers={"Retry-After": "1"} if mode == "http429" else None,
        )
    await em.sleep(wait)


async def phone_add(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    return em.phones.add(body, em.now(), em.stamp()).to_json()


async def phone_update(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    phone = em.phones.get(body, em.now())
    return em.phones.update(phone, body, em.stamp()).to_json()


async def phone_list(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    return em.phones.listing(body, em.now())


async def phone_open(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    em.phones.open(em.phones.get(body, em.now()), em.now())
    return NO_DATA


async def phone_running(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    return em.phones.get(body, em.now()).running()


async def phone_suspend(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    em.phones.suspend(em.phones.get(body, em.now()))
    return NO_DATA


async def phone_shutdown(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    phone = em.phones.get(body, em.now())
    if not em.dice.shutdown_lost(em.faults):  # lost: accepted, never carried out
        em.phones.shutdown(phone, em.now())
    return NO_DATA


async def phone_restart(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    em.phones.restart(em.phones.get(body, em.now()), em.now())
    return NO_DATA


async def phone_recover(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    em.phones.recover(em.phones.get(body, em.now()), em.now())
    return NO_DATA


async def phone_group_list(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    return em.phones.list_groups(body)


async def phone_group_add(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    return em.phones.add_group(body)


async def phone_group_edit(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    return em.phones.edit_group(body)


async def phone_group_delete(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    em.phones.delete_group(body)
    return NO_DATA


async def phone_batch_remark(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    phones = em.phones.phones_of(body)
    remark = body.get("remark")
    if not isinstance(remark, str):
        raise LocalApiError(f"remark {text.BAD_FIELD}")
    append = body.get("remarkType") == 2
    for phone in phones:
        new = phone.fields["remark"] + remark if append else remark
        em.phones.update(phone, {"remark": new}, em.stamp())
    return NO_DATA


async def phone_batch_group(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    phones = em.phones.phones_of(body)
    if not isinstance(body.get("groupId"), str) or body["groupId"] not in em.phones.groups:
        raise LocalApiError(text.GROUP_NOT_FOUND)
    for phone in phones:
        em.phones.update(phone, {"groupId": body["groupId"]}, em.stamp())
    return NO_DATA


async def phone_batch_proxy(em: BitBrowserEmulator, node: Node, body: dict[str, Any]) -> Any:
    phones = em.phones.phones_of(body)
    keys = ("host", "port", "proxyUserName", "proxyPassword")
    change = {k: body.get(k) for k in keys}
    for phone in phones:
        em.phones.update(phone, change, em.stamp())
    return NO_DATA
