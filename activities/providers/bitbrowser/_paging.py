"""Paging the Local API's lists, and the marks that stand in for labels and idempotency keys.

A listing pages by 100 until an empty or short page or `total` objects, keeps each
id once, and stops with a `ServerError` past `MAX_LIST_PAGES`. A mark (pool and slot
key) is matched exactly by the client, since the server's filters are fuzzy; before
each create `BrowserProfiles.create_marked` looks for its mark. Why: docs/providers.md, "BitBrowser's
Local API".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from devicepool.activities.errors import ServerError
from devicepool.activities.providers.bitbrowser.models import (
    MAX_PAGE_SIZE,
    BrowserProfile,
    Phone,
)
from devicepool.api.errors import ErrorType

M = TypeVar("M", bound=BaseModel)
Obj = TypeVar("Obj", BrowserProfile, Phone)

# 1,000 pages of 100: far beyond an account devicepool manages, a stop for a server that loops.
MAX_LIST_PAGES = 1000


def check_mark(mark: str, *, max_length: int) -> str:
    """A mark as written: non-empty, no outer or inner line breaks, within the field's length."""
    if not isinstance(mark, str) or not mark.strip():
        raise ValueError("a mark must be a non-empty string")
    if mark != mark.strip() or any(c in mark for c in "\r\n\t"):
        raise ValueError(f"a mark has no surrounding spaces or line breaks: {mark!r}")
    if len(mark) > max_length:
        raise ValueError(f"a mark here is at most {max_length} characters: {mark!r}")
    return mark


def new_id(data: Any, call: str, what: str) -> str:
    """The id a create answers (`data.id`, or `data` itself), or a `ServerError` naming `call`."""
    found = data.get("id") if isinstance(data, dict) else data
    if not isinstance(found, str) or not found:
        raise ServerError(ErrorType.SERVER_ERROR, 200, f"{call}: the answer has no {what} id")
    return found


def validated(model: type[M], data: Any, call: str) -> M:
    """`data` as `model`, or a `ServerError` naming the call (never the data: it holds secrets)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        where = ", ".join(".".join(str(p) for p in e["loc"]) or "(answer)" for e in exc.errors())
        raise ServerError(
            ErrorType.SERVER_ERROR, 200, f"{call}: unexpected answer (at {where[:200]})"
        ) from None


def page_items(data: Any, call: str) -> tuple[list[Any], int | None]:
    """The items and `total` of a list answer: `{list, total}` (a bare list is tolerated)."""
    if isinstance(data, list):
        return data, None
    if not isinstance(data, dict):
        raise ServerError(ErrorType.SERVER_ERROR, 200, f"{call}: the answer is not a list page")
    items = data.get("list")
    if items is None:
        items = data.get("records", data.get("items", []))
    if not isinstance(items, list):
        raise ServerError(ErrorType.SERVER_ERROR, 200, f"{call}: `list` is not a list")
    total = data.get("total")
    return items, total if isinstance(total, int) and not isinstance(total, bool) else None


def oldest_first(obj: BrowserProfile | Phone) -> tuple[bool, int, str]:
    """The sort key of "oldest first": by `seq`, those without one last."""
    return (obj.seq is None, obj.seq or 0, obj.id)


class MarkedList(Generic[Obj]):
    """What both families' listings share: pages of `LIST`, each object's mark in `MARK`."""

    LIST: ClassVar[str]  # the list call's path
    PAGE: ClassVar[type[Any]]  # its page model: `items` and `total`
    MARK: ClassVar[str]  # the field holding the mark (the one `LIST` filters by)
    MAX_MARK: ClassVar[int]
    MARKED: ClassVar[str]  # what a listing's error calls those holding one mark
    ORDER: ClassVar[dict[str, Any]] = {}  # what every page's body adds

    # One page (`list_page`, public: a test stands in a server that ignores `page` there).
    list_page: Callable[..., Awaitable[Any]]

    async def _list_call(self, body: dict[str, Any], on_turn: Callable[[], None] | None) -> Any:
        raise NotImplementedError

    async def find_by_mark(self, mark: str) -> list[Obj]:
        """Every object whose mark is exactly `mark`, oldest first (`seq`)."""
        check_mark(mark, max_length=self.MAX_MARK)
        found = await self._list_all({self.MARK: mark}, what=f"{self.MARKED} {mark!r}")
        return sorted((o for o in found if getattr(o, self.MARK) == mark), key=oldest_first)

    async def _page(
        self,
        page: int,
        page_size: int,
        filters: dict[str, Any],
        on_turn: Callable[[], None] | None = None,
    ) -> Any:
        """One page of `LIST` (0-based, `page_size` at most 100); filters None or "" are left out."""
        if page < 0 or not 1 <= page_size <= MAX_PAGE_SIZE:
            raise ValueError(f"page >= 0 and 1 <= page_size <= {MAX_PAGE_SIZE}")
        body = {"page": page, "pageSize": page_size, **self.ORDER}
        body.update({k: v for k, v in filters.items() if v is not None and v != ""})
        call = f"POST {self.LIST}"
        items, total = page_items(await self._list_call(body, on_turn), call)
        return validated(self.PAGE, {"items": items, "total": total}, call)

    async def _list_all(
        self,
        filters: dict[str, Any],
        *,
        what: str,
        prefix: str | None = None,
        on_turn: Callable[[], None] | None = None,
    ) -> list[Obj]:
        """Every object of every `list_page` (`filters`: its arguments; `on_turn` for the
        first page's call), each id once in the order first seen, those whose mark starts
        with `prefix` (when given) only."""
        seen: dict[str, Obj] = {}
        for page in range(MAX_LIST_PAGES):
            turn = {"on_turn": on_turn} if on_turn is not None and page == 0 else {}
            answer = await self.list_page(page, page_size=MAX_PAGE_SIZE, **filters, **turn)
            items: list[Obj] = answer.items
            before = len(seen)
            for item in items:
                seen.setdefault(item.id, item)
            # An empty or short page is the last one.
            if len(items) < MAX_PAGE_SIZE or (
                answer.total is not None and len(seen) >= answer.total
            ):
                break
            if len(seen) == before:
                # A full page of nothing new: the server does not page (it ignores `page`).
                raise ServerError(
                    ErrorType.SERVER_ERROR,
                    None,
                    f"listing {what} stopped: page {page} repeated items already seen",
                )
        else:
            raise ServerError(
                ErrorType.SERVER_ERROR,
                None,
                f"listing {what} stopped: still more after {MAX_LIST_PAGES} pages (MAX_LIST_PAGES)",
            )
        found = list(seen.values())
        if prefix:
            found = [o for o in found if getattr(o, self.MARK).startswith(prefix)]
        return found
