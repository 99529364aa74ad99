"""The Temporal Web UI in headless Debian chromium, for the tests that look at it as a person does.

Playwright drives `/usr/bin/chromium` (never its own browser download). `chromium`
launches it (a module's tests share one: a launch costs a few CPU-s); `ui_page` opens
one page, in a context of its own, with the tests' timeouts; `shown_after_reloads`
loads a list until its rows appear (the UI lists from visibility, which lags);
`open_workflow_page` goes to a workflow by id and waits for the UI's redirect to its
current run; `open_from_list` clicks its link in a list instead.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

from playwright.async_api import Browser, Locator, Page, async_playwright, expect

from devicepool.api.names import POOL_COLUMNS
from tests.helpers.programs import program

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
UI_TIMEOUT_MS = 20_000


def require_chromium() -> str:
    """The `chromium` on PATH (where `make test` installs Debian's), or skip the test."""
    return program("chromium", "install Debian's `chromium` package; `make test` does")


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """Headless chromium (skips the test when it is not installed), closed after."""
    executable = require_chromium()
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            await browser.close()


@asynccontextmanager
async def ui_page(
    browser: Browser | None = None, timeout_ms: int = UI_TIMEOUT_MS
) -> AsyncIterator[Page]:
    """One 1400x900 page, in a browser context of its own (no storage shared with another
    test's page), on `browser` or a chromium of its own; closed after. Its actions and
    `expect`'s assertions (their own default is 5 s) wait `timeout_ms`: the UI re-renders
    slowly on a loaded machine (a full run once missed a column header 5 s after a reload)."""
    if browser is None:
        async with chromium() as own, ui_page(own, timeout_ms) as page:
            yield page
        return
    page = await browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.set_default_timeout(timeout_ms)
        expect.set_options(timeout=timeout_ms)
        yield page
    finally:
        await page.close()


async def shown_after_reloads(page: Page, url: str, *locators: Locator, tries: int = 6) -> None:
    """Load `url` until each of `locators` matches once (visibility and the UI's query lag
    on a busy machine), then assert they do. (A load of the UI costs chromium ~1.5 CPU-s.)"""
    for _ in range(tries):
        await page.goto(url)
        try:
            for locator in locators:
                await expect(locator).to_have_count(1, timeout=5_000)
            break
        except AssertionError:
            continue
    for locator in locators:
        await expect(locator).to_have_count(1)


async def open_workflow_page(
    page: Page, base: str, workflow_id: str, timeout_ms: int = 30_000
) -> None:
    """The workflow's page by id (the slash is %2F); the UI redirects to the current run
    (it looks the run up first: slow on a loaded machine; a pool may have continued as new)."""
    page_url = f"{base}/{quote(workflow_id, safe='')}"
    await page.goto(page_url)
    await expect(page).to_have_url(
        re.compile(re.escape(page_url) + r"/[0-9a-f-]{36}/"), timeout=timeout_ms
    )


async def open_from_list(page: Page, base: str, link: Locator, workflow_id: str) -> None:
    """The workflow's page from its `link` in the open list, on the run the row shows: a
    click stays in the loaded UI, where a new load (`open_workflow_page`) costs chromium
    about a CPU-s more. Close the columns drawer first: it makes the list inert."""
    await link.click()
    page_url = f"{base}/{quote(workflow_id, safe='')}/"
    await expect(page).to_have_url(re.compile(re.escape(page_url) + r"[0-9a-f-]{36}/"))


async def listed_in_visibility(client: Any, workflow_id: str, timeout: float = 30) -> None:
    query = f'WorkflowId = "{workflow_id}" AND ExecutionStatus = "Running"'
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if [w async for w in client.list_workflows(query)]:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"{workflow_id} never listed by visibility as running")


async def pool_columns_shown(
    page: Page, row: Locator, remove: tuple[str, ...] = ()
) -> tuple[list[str], dict[str, str]]:
    """Add the pool columns (the `DevicePool*` search attributes) to the open list, as
    the README says, and take out `remove`; returns the headers and what `row` shows in
    each pool column."""
    await page.get_by_role("button", name="Configure Columns").click()
    for attribute in POOL_COLUMNS:
        await page.get_by_role("button", name=f"Add {attribute} column").click()
    for column in remove:
        await page.get_by_role("button", name=f"Remove {column} column").click()
    headers = [h.strip() for h in await page.locator("thead th").all_inner_texts()]
    cells = [c.strip() for c in await row.locator("td").all_inner_texts()]
    return headers, {a: cells[headers.index(a)] for a in POOL_COLUMNS}
