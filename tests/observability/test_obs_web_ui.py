"""The Temporal Web UI, looked at the way a person does: headless Debian chromium.

Opens the dev server's UI (started by the obs_stack fixture with the UI on),
finds the pool in the workflow list (id `devicepool/<name>`, type
`DevicePool`, running). The screenshot goes to the test's tmp dir and is
copied to docs/ui-pool.png for the README.
"""

from __future__ import annotations

import asyncio
import html
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import ObsStack

from api.loader import parse_pool
from api.names import pool_workflow_id
from client.pool_client import PoolClient

pytestmark = [pytest.mark.e2e, pytest.mark.devserver, pytest.mark.timeout(90)]

POOL = "obs-ui-pool"
DOCS = Path(__file__).resolve().parents[2] / "docs"


def chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("chromium not installed (Debian package `chromium`; `make test` installs it)")


async def browse(
    url: str, *, screenshot: Path | None = None, budget_ms: int = 8000, virtual: bool = True
) -> str:
    """The DOM after `budget_ms` (and a screenshot if asked).

    `virtual=False` uses `--timeout` (real time) instead of
    `--virtual-time-budget`: a running workflow's page long-polls its history,
    which virtual time waits out forever.
    """
    with tempfile.TemporaryDirectory() as profile:
        args = [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            f"--user-data-dir={profile}",
            "--window-size=1400,900",
            f"--virtual-time-budget={budget_ms}" if virtual else f"--timeout={budget_ms}",
        ]
        args += [f"--screenshot={screenshot}"] if screenshot else ["--dump-dom"]
        proc = await asyncio.create_subprocess_exec(
            *args, url, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), 30)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        assert proc.returncode == 0, err.decode(errors="replace")[-2000:]
        return html.unescape(out.decode(errors="replace"))


async def test_web_ui_shows_the_pool(obs_stack: ObsStack, tmp_path: Path) -> None:
    chromium()
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
        base = f"http://127.0.0.1:{obs_stack.ui_port}/namespaces/default/workflows"

        listing = await browse(base)
        assert pool_workflow_id(POOL) in listing, listing[-3000:]
        assert "DevicePool" in listing
        assert "RUNNING" in listing.upper()
        shot = tmp_path / "ui-pool-list.png"
        await browse(base, screenshot=shot)
        assert shot.stat().st_size > 10_000

        # The detail page (summary, current details) long-polls the running
        # workflow's history, which headless virtual time never finishes; the
        # list page is what the README shows.
        DOCS.mkdir(exist_ok=True)
        shutil.copyfile(shot, DOCS / "ui-pool.png")
    finally:
        await handle.cancel()
