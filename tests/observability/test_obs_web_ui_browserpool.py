"""A BrowserPool in the Temporal Web UI, as a person sees it (headless Debian chromium).

The obs_stack's worker runs BrowserPools but no node worker beats, so the pool
applied here is below its size with no live node: the case an operator opens
the UI for. Its row in the `WorkflowType="BrowserPool"` list shows the pool
columns (platform `browser`, desired, ready, phase `Degraded`); its page's *User
Metadata* tab shows the static summary `BrowserPoolClient.apply` set and the
live details (`workflows/browserpool/publish.py` `details`): the figures block,
"no profile placed", and the conditions that are not fine as list items.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from playwright.async_api import expect

from devicepool.api.browserpool.v1beta1 import BrowserPool, BrowserPoolSpec
from devicepool.api.names import browser_pool_workflow_id
from devicepool.api.v1alpha1 import ObjectMeta
from devicepool.client.browser_pools import BrowserPoolClient
from devicepool.testing import eventually
from tests.helpers.obs_stack import ObsStack
from tests.helpers.web_ui import (
    listed_in_visibility,
    open_workflow_page,
    pool_columns_shown,
    require_chromium,
    shown_after_reloads,
    ui_page,
)

pytestmark = [pytest.mark.e2e, pytest.mark.devserver, pytest.mark.timeout(180)]

POOL = "obs-ui-browsers"


async def test_a_browser_pool_in_the_list_and_on_its_page(obs_stack: ObsStack) -> None:
    require_chromium()
    client = obs_stack.client
    spec = BrowserPoolSpec(replicas=2, node_selector={"os": "windows"})
    await BrowserPoolClient(client).apply(BrowserPool(metadata=ObjectMeta(name=POOL), spec=spec))
    handle = client.get_workflow_handle(browser_pool_workflow_id(POOL))
    try:

        async def degraded() -> bool:
            attrs = (await handle.describe()).typed_search_attributes
            return {p.key.name: p.value for p in attrs}.get("DevicePoolPhase") == "Degraded"

        await eventually(degraded, timeout=30, what="the pool Degraded (no node)")
        await listed_in_visibility(client, browser_pool_workflow_id(POOL))
        base = f"http://127.0.0.1:{obs_stack.ui_port}/namespaces/default/workflows"
        async with ui_page() as page:
            # The BrowserPools alone, with the pool columns added.
            query = quote('WorkflowType="BrowserPool"')
            link = page.get_by_role("link", name=browser_pool_workflow_id(POOL), exact=True)
            row = page.locator("tr").filter(has=link)
            await shown_after_reloads(page, f"{base}?query={query}", row)
            await expect(row).to_contain_text("BrowserPool")
            _, shown = await pool_columns_shown(page, row)
            assert shown["DevicePoolPlatform"] == "browser", shown
            assert shown["DevicePoolDesired"] == "2", shown
            assert shown["DevicePoolReady"] == "0", shown
            assert shown["DevicePoolPhase"] == "Degraded", shown
            assert shown["DevicePoolRegion"] == "" and shown["DevicePoolAccount"] == "", shown

            await open_workflow_page(page, base, browser_pool_workflow_id(POOL))
            await page.get_by_text("User Metadata", exact=True).first.click()
            summary = page.frame_locator("#user-metadata-summary").locator("body")
            await expect(summary).to_contain_text(
                f"BrowserPool {POOL}: BitBrowser profiles on nodes os=windows, browsers open"
            )
            details = page.frame_locator("#user-metadata-current-details")
            body = details.locator("body")
            await expect(body).to_contain_text(f"{POOL} · BrowserPool · nodes os=windows")
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
