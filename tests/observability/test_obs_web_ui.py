"""The Temporal Web UI, looked at the way a person does: headless Debian chromium.

Playwright (the `playwright` wheel, driving `/usr/bin/chromium`; never its own
browser download) opens the dev server's UI (started by the obs_stack fixture
with the UI on), finds the pool in the workflow list (id `devicepool/<name>`,
type `DevicePool`, running), then the pools-only list the dev banner and the
README link (`?query=WorkflowType="DevicePool"`: the pool, not its health
child) with the pool columns added as the README says (Configure Columns, the
`DevicePool*` search attributes), opens the pool's page and its "User
Metadata" tab, and checks the static summary set by `PoolClient.apply` and the
current details (`workflows/pool/status.py` `details`: an aligned block, one line
per figure, no Markdown table, which the UI does not render) against the
pool's `status` query. UI 2.54 renders both as markdown inside iframes
(`#user-metadata-summary`, `#user-metadata-current-details`).

A BrowserPool, as an operator opens the UI for it: the obs_stack's worker runs
BrowserPools but no node worker beats, so the pool is below its size with no
live node. Its row in the `WorkflowType="BrowserPool"` list shows the pool
columns (platform `browser`, desired, ready, phase `Degraded`); its page's *User
Metadata* tab shows the static summary `BrowserPoolClient.apply` set and the
live details (`workflows/browserpool/publish.py` `details`): the figures block,
"no profile placed", and the conditions that are not fine as list items.

The module's tests share one chromium (a launch costs a few CPU-s), each test
on a page of its own context, so no column set up by one is seen by the other.

Screenshots go to the test's tmp dir; `make ui-screenshot` sets
DEVICEPOOL_UI_SCREENSHOTS=docs to refresh docs/ui-pool.png and
docs/ui-pools.png for the README (a plain test run never touches docs/).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.async_api import Browser, Page, expect

from devicepool.api.browserpool.v1beta1 import BrowserPool, BrowserPoolSpec
from devicepool.api.loader import parse_pool
from devicepool.api.names import (
    POOL_COLUMNS,
    browser_pool_workflow_id,
    health_workflow_id,
    pool_workflow_id,
)
from devicepool.api.v1alpha1 import ObjectMeta
from devicepool.client._dev_commands import pool_columns_storage, pools_only, pools_view
from devicepool.client.browser_pools import BrowserPoolClient
from devicepool.client.pool_client import PoolClient
from devicepool.testing import eventually
from tests.helpers import web_ui
from tests.helpers.obs_stack import ObsStack

# 25-45 s alone or in a full run; once over 90 s on a loaded machine (fresh-clone CI),
# where pytest-timeout then ends the whole xdist worker.
pytestmark = [pytest.mark.e2e, pytest.mark.devserver, pytest.mark.timeout(180)]

POOL = "obs-ui-pool"
BROWSER_POOL = "obs-ui-browsers"
# A directory to copy the screenshots to (`make ui-screenshot`: docs/).
SCREENSHOTS_ENV = "DEVICEPOOL_UI_SCREENSHOTS"
ROOT = Path(__file__).resolve().parents[2]
# No test here reads the worker's pool gauges: their production refresh (obs_stack).
GAUGES_EVERY = 5.0


def plain(markdown: str) -> str:
    """What the UI shows for a one-line markdown string: no emphasis or code marks."""
    return re.sub(r"\*\*|`", "", markdown)


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with web_ui.chromium() as browser:
        yield browser


async def ready_shown(page: Page) -> int:
    """The `ready` line of the figures block in the rendered current details."""
    details = page.frame_locator("#user-metadata-current-details")
    block = details.locator("pre").first
    await expect(block).to_be_visible(timeout=web_ui.UI_TIMEOUT_MS)
    # No Markdown table: the UI runs its cells together (`phasedesiredready...`).
    await expect(details.locator("table")).to_have_count(0)
    figures = dict(line.split(None, 1) for line in (await block.inner_text()).splitlines())
    expected = {"phase", "desired", "ready", "busy", "provisioning", "pending", "offline"}
    assert expected <= set(figures), figures
    return int(figures["ready"])


async def test_web_ui_shows_the_pool(obs_stack: ObsStack, browser: Browser, tmp_path: Path) -> None:
    pools = PoolClient(obs_stack.client)
    await pools.apply(
        parse_pool(
            {
                "apiVersion": "mobile.example.com/v1alpha1",
                "kind": "DevicePool",
                "metadata": {"name": POOL},
                "spec": {
                    "provider": "bitcloudphone",
                    "platform": "android",
                    "region": "us-west",
                    "osVersion": "14",
                    "replicas": 2,
                    "proxy": {"poolRef": "proxyseller-us", "stickyTTL": 900},
                },
            }
        )
    )
    handle = obs_stack.client.get_workflow_handle(pool_workflow_id(POOL))
    try:
        for _ in range(100):
            status = await handle.query("status")
            if status.get("readyDevices") == 2:
                break
            await asyncio.sleep(0.2)
        else:
            raise AssertionError(f"pool never ready: {status}")
        description = await handle.describe()
        summary = await description.static_summary()
        assert summary, "PoolClient.apply set no static summary"
        summary_text = plain(summary)
        for part in (POOL, "android", "us-west", "account default"):
            assert part in summary_text, summary_text

        base = f"http://127.0.0.1:{obs_stack.ui_port}/namespaces/default/workflows"
        async with web_ui.ui_page(browser) as page:
            # The list: the pool's row, its type and that it runs, and its
            # child beside it. The UI lists from visibility, which lags a
            # start: wait until visibility has both runs, and reload a list
            # loaded too early.
            await web_ui.listed_in_visibility(obs_stack.client, pool_workflow_id(POOL))
            await web_ui.listed_in_visibility(obs_stack.client, health_workflow_id(POOL))
            # (exact: the pool's child `devicepool/<name>/health` is listed too)
            wid_link = page.get_by_role("link", name=pool_workflow_id(POOL), exact=True)
            row = (
                page.locator("tr")
                .filter(has=wid_link)
                .filter(has_text=re.compile("running", re.IGNORECASE))
            )
            health = page.get_by_role("link", name=health_workflow_id(POOL), exact=True)
            await web_ui.shown_after_reloads(page, base, row, health)
            await expect(row).to_contain_text(description.run_id)
            await expect(row).to_contain_text("DevicePool")
            await expect(row).to_contain_text(re.compile("running", re.IGNORECASE))

            # The pools-only link (banner, README): the pool and none of
            # its children, which the full list shows beside it.
            await web_ui.shown_after_reloads(page, pools_only(base), row)
            await expect(health).to_have_count(0)

            # The pool columns, as the README says: added, and the run id,
            # type, start and end taken out (added columns go after End,
            # off a 1400-pixel screen while those four stay).
            readme = " ".join((ROOT / "README.md").read_text().split())
            for step in (
                "remove (the minus beside each) `Run ID`, `Type`, `Start` and `End`",
                "click *Collapse Navigation*",
            ):
                assert step in readme, step
            headers, shown = await web_ui.pool_columns_shown(
                page, row, remove=("Run ID", "Type", "Start", "End")
            )
            assert shown["DevicePoolPlatform"] == "android", shown
            assert shown["DevicePoolRegion"] == "us-west", shown
            assert shown["DevicePoolDesired"] == "2", shown
            assert shown["DevicePoolAccount"] == "default", shown
            # The drawer closed and the navigation collapsed (the README's last
            # step), then one reload: the columns and the collapse stay (browser
            # storage), every pool column on the 1400-pixel screen with no scrolling.
            await page.get_by_role("button", name="Close Workflows Table configuration").click()
            await page.get_by_title("Collapse Navigation").click()
            await page.reload()
            await expect(page.locator("thead th", has_text="DevicePoolReady")).to_have_count(1)
            await expect(row).to_have_count(1)
            for attribute in POOL_COLUMNS:
                header = page.locator("thead th", has_text=attribute)
                await expect(header).to_be_in_viewport(ratio=0.95)
                cell = row.locator("td").nth(headers.index(attribute))
                await expect(cell).to_be_in_viewport(ratio=0.95)
            await page.screenshot(path=tmp_path / "ui-pools.png")

            # The pool's page from its row, as a person opens it (a page by id, the
            # slash as %2F: tests/encryption/test_enc_web_ui.py).
            await web_ui.open_from_list(page, base, wid_link, pool_workflow_id(POOL))
            await page.get_by_text("User Metadata", exact=True).first.click()
            await expect(page).to_have_url(re.compile(r"/user-metadata$"))

            shown_summary = page.frame_locator("#user-metadata-summary").locator("body")
            await expect(shown_summary).to_contain_text(summary_text)

            # Current details come from a live query; the pool is steady
            # at 2, but allow a refresh should a device flip meanwhile.
            for _ in range(5):
                ready = await ready_shown(page)
                expected = (await handle.query("status"))["readyDevices"]
                if ready == expected:
                    break
                await page.reload()
            assert ready == expected, f"UI shows ready={ready}, status query {expected}"
            details = page.frame_locator("#user-metadata-current-details").locator("body")
            await expect(details).to_contain_text(f"{POOL} · android · us-west")
            await expect(details.locator("li")).to_have_count(len(status["conditions"]))

            await page.screenshot(path=tmp_path / "ui-pool.png")
        shots = [tmp_path / "ui-pool.png", tmp_path / "ui-pools.png"]
        assert all(shot.stat().st_size > 10_000 for shot in shots)
        if os.environ.get(SCREENSHOTS_ENV):
            target = Path(os.environ[SCREENSHOTS_ENV])
            target.mkdir(parents=True, exist_ok=True)
            for shot in shots:
                shutil.copyfile(shot, target / shot.name)
    finally:
        await handle.cancel()


async def test_a_browser_pool_in_the_list_and_on_its_page(
    obs_stack: ObsStack, browser: Browser
) -> None:
    client = obs_stack.client
    spec = BrowserPoolSpec(replicas=2, node_selector={"os": "windows"})
    await BrowserPoolClient(client).apply(
        BrowserPool(metadata=ObjectMeta(name=BROWSER_POOL), spec=spec)
    )
    handle = client.get_workflow_handle(browser_pool_workflow_id(BROWSER_POOL))
    try:

        async def degraded() -> bool:
            attrs = (await handle.describe()).typed_search_attributes
            return {p.key.name: p.value for p in attrs}.get("DevicePoolPhase") == "Degraded"

        await eventually(degraded, timeout=30, what="the pool Degraded (no node)")
        await web_ui.listed_in_visibility(client, browser_pool_workflow_id(BROWSER_POOL))
        base = f"http://127.0.0.1:{obs_stack.ui_port}/namespaces/default/workflows"
        async with web_ui.ui_page(browser) as page:
            # The BrowserPools alone, with the pool columns added.
            query = quote('WorkflowType="BrowserPool"')
            link = page.get_by_role("link", name=browser_pool_workflow_id(BROWSER_POOL), exact=True)
            row = page.locator("tr").filter(has=link)
            await web_ui.shown_after_reloads(page, f"{base}?query={query}", row)
            await expect(row).to_contain_text("BrowserPool")
            _, shown = await web_ui.pool_columns_shown(page, row)
            assert shown["DevicePoolPlatform"] == "browser", shown
            assert shown["DevicePoolDesired"] == "2", shown
            assert shown["DevicePoolReady"] == "0", shown
            assert shown["DevicePoolPhase"] == "Degraded", shown
            assert shown["DevicePoolRegion"] == "" and shown["DevicePoolAccount"] == "", shown

            await page.get_by_role("button", name="Close Workflows Table configuration").click()
            await web_ui.open_from_list(page, base, link, browser_pool_workflow_id(BROWSER_POOL))
            await page.get_by_text("User Metadata", exact=True).first.click()
            summary = page.frame_locator("#user-metadata-summary").locator("body")
            await expect(summary).to_contain_text(
                f"BrowserPool {BROWSER_POOL}: BitBrowser profiles on nodes os=windows, "
                "browsers open"
            )
            details = page.frame_locator("#user-metadata-current-details")
            body = details.locator("body")
            await expect(body).to_contain_text(f"{BROWSER_POOL} · BrowserPool · nodes os=windows")
            await expect(details.locator("table")).to_have_count(0)
            figures = await details.locator("pre").first.inner_text()
            lines = dict(line.split(None, 1) for line in figures.splitlines())
            assert lines == {
                "phase": "Degraded",
                "desired": "2",
                "ready": "0",
                "open": "0",
                "lost": "0",
            }, lines
            await expect(body).to_contain_text("no profile placed")
            # Ready (NoNodes) and NodesAvailable (NoLiveNode): one item each, nothing fine.
            items = details.locator("li")
            await expect(items).to_have_count(2)
            await expect(items.filter(has_text="Ready False · NoNodes")).to_have_count(1)
            await expect(items.filter(has_text="NodesAvailable False")).to_have_count(1)
    finally:
        await handle.cancel()


VIEW_POOL = "obs-ui-view"


async def test_the_pools_view_link_and_the_columns_line(
    obs_stack: ObsStack, browser: Browser
) -> None:
    """The docs' shortest way to the pool columns: the link saves the view *Pools* (the UI's
    `savedQuery`), the console line sets the columns and folds the navigation, both kept in
    the browser; every pool column then fits the 1400-pixel screen, with no click at all."""
    pools = PoolClient(obs_stack.client)
    manifest = {
        "apiVersion": "mobile.example.com/v1beta1",
        "kind": "DevicePool",
        "metadata": {"name": VIEW_POOL},
        "spec": {"platform": "android", "region": "us-west", "osVersion": "14", "replicas": 0},
    }
    await pools.apply(parse_pool(manifest))
    handle = obs_stack.client.get_workflow_handle(pool_workflow_id(VIEW_POOL))
    try:
        await web_ui.listed_in_visibility(obs_stack.client, pool_workflow_id(VIEW_POOL))
        base = f"http://127.0.0.1:{obs_stack.ui_port}/namespaces/default/workflows"
        async with web_ui.ui_page(browser) as page:
            # What the pasted line does before its reload, before every page load here.
            await page.add_init_script(script=pool_columns_storage())
            link = page.get_by_role("link", name=pool_workflow_id(VIEW_POOL), exact=True)
            row = page.locator("tr").filter(has=link)
            await web_ui.shown_after_reloads(page, pools_view(base), row)
            # The view is saved and shown as the one open; the UI dropped the parameter.
            await expect(page.get_by_test_id("saved-views-button")).to_contain_text("Pools")
            saved = await page.evaluate("localStorage.getItem('saved-workflow-queries')")
            assert '"name":"Pools"' in saved and 'WorkflowType=\\"DevicePool\\"' in saved, saved
            assert "savedQuery" not in page.url
            headers = [h.strip() for h in await page.locator("thead th").all_inner_texts()]
            for gone in ("Run ID", "Type", "Start", "End"):
                assert gone not in headers, headers
            for attribute in POOL_COLUMNS:
                header = page.locator("thead th", has_text=attribute)
                await expect(header).to_be_in_viewport(ratio=0.95)
            cells = [c.strip() for c in await row.locator("td").all_inner_texts()]
            assert cells[headers.index("DevicePoolDesired")] == "0", (headers, cells)
            assert cells[headers.index("DevicePoolRegion")] == "us-west", (headers, cells)
            # Opened again without the parameter (its bookmark): still the pools alone.
            await page.goto(pools_only(base))
            await expect(row).to_have_count(1)
    finally:
        await handle.cancel()
