"""The Temporal Web UI, looked at the way a person does: headless Debian chromium.

Playwright (the `playwright` wheel, driving `/usr/bin/chromium`; never its own
browser download) opens the dev server's UI (started by the obs_stack fixture
with the UI on), finds the pool in the workflow list (id `devicepool/<name>`,
type `DevicePool`, running), opens the pool's page and its "User Metadata"
tab, and checks the static summary set by `PoolClient.apply` and the ready
count in the current details (`_publish_details` in workflows/pool.py) against
the pool's `status` query. UI 2.54 renders both as markdown inside iframes
(`#user-metadata-summary`, `#user-metadata-current-details`). The screenshot
goes to the test's tmp dir and is copied to docs/ui-pool.png for the README.
"""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from obs_support import ObsStack
from playwright.async_api import Page, async_playwright, expect

from devicepool.api.loader import parse_pool
from devicepool.api.names import pool_workflow_id
from devicepool.client.pool_client import PoolClient

pytestmark = [pytest.mark.e2e, pytest.mark.devserver, pytest.mark.timeout(90)]

POOL = "obs-ui-pool"
DOCS = Path(__file__).resolve().parents[2] / "docs"
CHROMIUM = Path("/usr/bin/chromium")
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
UI_TIMEOUT_MS = 10_000


def require_chromium() -> None:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not found: install Debian's `chromium` package (`make test` does)")


def plain(markdown: str) -> str:
    """What the UI shows for a one-line markdown string: no emphasis or code marks."""
    return re.sub(r"\*\*|`", "", markdown)


async def ready_shown(page: Page) -> int:
    """The `ready` cell of the status table in the rendered current details."""
    table = page.frame_locator("#user-metadata-current-details").locator("table").first
    await expect(table).to_be_visible(timeout=UI_TIMEOUT_MS)
    headers = [h.strip() for h in await table.locator("th").all_inner_texts()]
    cells = [
        c.strip() for c in await table.locator("tbody tr").first.locator("td").all_inner_texts()
    ]
    assert headers[:6] == ["phase", "desired", "ready", "busy", "provisioning", "offline"], headers
    return int(cells[headers.index("ready")])


async def listed_in_visibility(client: Any, workflow_id: str, timeout: float = 30) -> None:
    query = f'WorkflowId = "{workflow_id}" AND ExecutionStatus = "Running"'
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if [w async for w in client.list_workflows(query)]:
            return
        await asyncio.sleep(0.5)
    raise AssertionError(f"{workflow_id} never listed by visibility as running")


async def test_web_ui_shows_the_pool(obs_stack: ObsStack, tmp_path: Path) -> None:
    require_chromium()
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
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                page = await browser.new_page(viewport={"width": 1400, "height": 900})
                page.set_default_timeout(UI_TIMEOUT_MS)

                # The list: the pool's row, its type and that it runs. The UI
                # lists from visibility, which lags a start: wait until
                # visibility has the run, and reload a list loaded too early.
                await listed_in_visibility(obs_stack.client, pool_workflow_id(POOL))
                # (exact: the pool's child `devicepool/<name>/health` is listed too)
                wid_link = page.get_by_role("link", name=pool_workflow_id(POOL), exact=True)
                row = (
                    page.locator("tr")
                    .filter(has=wid_link)
                    .filter(has_text=re.compile("running", re.IGNORECASE))
                )
                for _ in range(6):
                    await page.goto(base)
                    try:
                        await expect(row).to_have_count(1, timeout=5_000)
                        break
                    except AssertionError:
                        continue
                await expect(row).to_have_count(1)
                await expect(row).to_contain_text(description.run_id)
                await expect(row).to_contain_text("DevicePool")
                await expect(row).to_contain_text(re.compile("running", re.IGNORECASE))

                # The pool's page by workflow id (the slash is %2F); the UI
                # redirects to the current run.
                page_url = f"{base}/{quote(pool_workflow_id(POOL), safe='')}"
                await page.goto(page_url)
                await expect(page).to_have_url(
                    re.compile(re.escape(f"{page_url}/{description.run_id}/"))
                )
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

                shot = tmp_path / "ui-pool.png"
                await page.screenshot(path=shot)
            finally:
                await browser.close()
        assert shot.stat().st_size > 10_000
        DOCS.mkdir(exist_ok=True)
        shutil.copyfile(shot, DOCS / "ui-pool.png")
    finally:
        await handle.cancel()
