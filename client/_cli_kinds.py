"""How the pool commands reach a kind: one `KindView` a kind (`api.kinds`), and the names.

`split_kind` reads how a command names its pool (`browserpool/NAME`, `devicepool/NAME`,
`browserpools`, or a bare NAME); `meant` lists the kinds a name may mean, DevicePool first; a
command that changes a pool refuses a bare NAME both kinds have (`kind_to_change`). A `KindView`
is what the commands print of a kind."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import typer

from devicepool.api.kinds import BROWSER_POOL, DEVICE_POOL, KINDS, Kind, resource_named
from devicepool.client import _cli_browser, _cli_views
from devicepool.client._results import DeleteResult
from devicepool.client.errors import BadInput, DevicePoolError, PoolNotFound
from devicepool.client.render import print_table

T = TypeVar("T")


async def _devices(client: Any, name: str) -> list[dict[str, Any]]:
    view = await client.devices(name)
    return [d.model_dump(mode="json", by_alias=True) for d in view.devices]


def _device_deleted(name: str, result: DeleteResult) -> list[str]:
    if not result.closed:
        return [f"devicepool/{name} deleting (use --wait to follow the teardown)"]
    lines = [f"devicepool/{name} deleted ({result.devices_left} devices left)"]
    if result.profiles_retired:
        lines.append(
            f"{result.profiles_retired} cloud-phone profile(s) kept, powered off and marked "
            "retired: the BitBrowser Local API has no delete"
        )
    return lines


def _browser_deleted(name: str, result: DeleteResult) -> list[str]:
    if result.closed:
        return [f"browserpool/{name} deleted (every profile closed and deleted)"]
    return [
        f"browserpool/{name} deleting (every profile is closed and deleted on its node; "
        f"`devicepool get browserpool/{name}` follows it)"
    ]


@dataclass(frozen=True)
class KindView:
    kind: Kind
    # `get`'s rows, in `kind.columns` order, and what it says when there are none.
    rows: Callable[[Sequence[Any]], list[list[Any]]]
    none_found: str
    print_description: Callable[[dict[str, Any]], None]
    # `devices NAME`: the kind's items (devices, profiles), and their table.
    items: Callable[[Any, str], Awaitable[list[dict[str, Any]]]]
    print_items: Callable[[list[dict[str, Any]]], None]
    # The lines `delete` prints.
    deleted: Callable[[str, DeleteResult], list[str]]


VIEWS: dict[str, KindView] = {
    DEVICE_POOL.name: KindView(
        kind=DEVICE_POOL,
        rows=lambda pools: [_cli_views.pool_row(p) for p in pools],
        none_found="No pools found.",
        print_description=_cli_views.print_description,
        items=_devices,
        print_items=_cli_views.print_devices,
        deleted=_device_deleted,
    ),
    BROWSER_POOL.name: KindView(
        kind=BROWSER_POOL,
        rows=_cli_browser.browser_rows,
        none_found="No browser pools found.",
        print_description=_cli_browser.print_browser_description,
        items=lambda client, name: client.profiles(name),
        print_items=_cli_browser.print_profiles,
        deleted=_browser_deleted,
    ),
}


def split_kind(name: str | None) -> tuple[str, str | None]:
    """(kind, pool name or None) for `browserpool/NAME`, `browserpools`, or a bare NAME."""
    if name is None:
        return DEVICE_POOL.name, None
    listed = resource_named(name)
    if listed is not None:
        return listed.name, None
    kind_name, slash, rest = name.partition("/")
    if not slash:
        return DEVICE_POOL.name, name
    kind = resource_named(kind_name)
    if kind is None:
        known = ", ".join(sorted(k.resource for k in KINDS.values()))
        raise BadInput(f"{name}: unknown kind {kind_name!r} (known: {known})")
    return kind.name, rest


def meant(named: str | None) -> list[Kind]:
    """The kinds `named` may mean, in the order tried: its own when it says one
    (`browserpool/NAME`, `browserpools`), else every kind, DevicePool first."""
    kind, _ = split_kind(named)
    if named is not None and ("/" in named or resource_named(named) is not None):
        return [KINDS[kind]]
    return list(KINDS.values())


class NoPoolOfAnyKind(PoolNotFound):
    """A bare NAME that no kind it may mean has running (`pool "NAME" not found (no running
    DevicePool or BrowserPool of that name)`), where one kind's workflow id would mislead."""

    def __init__(self, name: str, kinds: Sequence[Kind]) -> None:
        DevicePoolError.__init__(
            self,
            f'pool "{name}" not found'
            f" (no running {' or '.join(kind.name for kind in kinds)} of that name)",
        )
        self.name = name


def not_found(kinds: Sequence[Kind], err: PoolNotFound) -> PoolNotFound:
    """`err`, said of every kind a bare NAME may mean when it may mean more than one."""
    return NoPoolOfAnyKind(err.name, kinds) if len(kinds) > 1 else err


@contextlib.contextmanager
def said_of(kinds: Sequence[Kind]) -> Iterator[None]:
    """`PoolNotFound` raised inside, as `not_found` says it (for a command on a bare NAME)."""
    try:
        yield
    except PoolNotFound as err:
        raise not_found(kinds, err) from None


async def first_kind(kinds: list[Kind], read: Callable[[Kind], Awaitable[T]]) -> tuple[Kind, T]:
    """The first of `kinds` whose pool answers `read`, and its answer; `PoolNotFound` (of
    every kind tried, `not_found`) when none has the pool."""
    missing: PoolNotFound | None = None
    for kind in kinds:
        try:
            return kind, await read(kind)
        except PoolNotFound as err:
            missing = missing or err
    assert missing is not None
    raise not_found(kinds, missing)


async def kind_to_change(client: Any, kinds: list[Kind], name: str) -> Kind:
    """The kind of the running pool a command changes: of `kinds`, the one whose pool runs
    (the first if none does). Which one a bare NAME both kinds have means is not guessed."""
    if len(kinds) == 1:
        return kinds[0]
    running = [kind for kind in kinds if await client.running(name, kind=kind.name)]
    if len(running) > 1:
        said = " or ".join(f"{kind.resource}/{name}" for kind in kinds)
        raise BadInput(
            f'both a {" and a ".join(k.name for k in running)} are named "{name}": say {said}'
        )
    return (running or kinds)[0]


def print_pools(pools: Sequence[Any], kinds: list[Kind]) -> None:
    """`get`'s table: one kind's alone, or, with pools of more than one, a table a kind
    (their columns differ) each led by a KIND column, DevicePools first."""
    shown = [kind for kind in kinds if any(p.kind == kind.name for p in pools)]
    if not shown:
        view = VIEWS[kinds[0].name] if len(kinds) == 1 else VIEWS[DEVICE_POOL.name]
        typer.echo(view.none_found, err=True)
        return
    for index, kind in enumerate(shown):
        rows = VIEWS[kind.name].rows([p for p in pools if p.kind == kind.name])
        if len(shown) == 1:
            if len(kinds) > 1 and kind is not DEVICE_POOL:  # as `kubectl get all`: kind/NAME
                rows = [[f"{kind.resource}/{row[0]}", *row[1:]] for row in rows]
            print_table(list(kind.columns), rows)
            return
        if index:
            typer.echo("")
        print_table(["KIND", *kind.columns], [[kind.name, *row] for row in rows])
