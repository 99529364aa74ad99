"""`devicepool dev --encrypt` end to end: history encrypted, the Web UI reads it through the codec.

The real `devicepool dev --encrypt` process (its dev server started with
`--ui-codec-endpoint`, its codec server, its worker with the key), one pool
applied by `--apply`. What is stored is checked with the stock `temporal` CLI
(no codec: the pool's start input is `binary/encrypted` and carries nothing
readable), what stays readable without a key (search attributes: the pool
columns and filters), what the devicepool CLI says without and with the key
(its `main`, in a thread of the test's process: a CLI process costs ~0.5 CPU-s
of imports), and then headless Debian chromium (Playwright, as tests/observability/test_obs_web_ui.py
drives it) reads the decoded pool input and summary on the pool's page.
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import pytest
from playwright.async_api import expect

from devicepool.client.cli import main
from devicepool.codec import ENV_KEY_FILES
from devicepool.testing import free_ports, write_pool
from tests.helpers.dev_stack import start_stack, stop_stack
from tests.helpers.web_ui import open_workflow_page, require_chromium, ui_page

pytestmark = [pytest.mark.e2e, pytest.mark.devserver, pytest.mark.timeout(240)]

POOL = "enc-ui-pool"
UI_TIMEOUT_MS = 30_000


def started_input(history: dict[str, object]) -> dict[str, object]:
    """The one payload of the pool's WorkflowExecutionStarted event, as stored."""
    first = history["events"][0]  # type: ignore[index]
    payloads = first["workflowExecutionStartedEventAttributes"]["input"]["payloads"]
    assert len(payloads) == 1, payloads
    return dict(payloads[0])


async def test_the_web_ui_reads_encrypted_history_through_the_codec_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    require_chromium()
    manifest = write_pool(tmp_path / "pool.yaml", POOL, replicas=1, region="eu-west",
                          proxy={"poolRef": "proxyseller-eu", "stickyTTL": 900})  # fmt: skip
    ui_port, codec_port = free_ports(2)
    stack = start_stack(
        tmp_path / "data",
        tmp_path / "dev.out",
        "--encrypt",
        "--ui-port",
        str(ui_port),
        "--codec-port",
        str(codec_port),
        "--apply",
        str(manifest),
    )
    try:
        banner = stack.out.read_text()
        key_file = tmp_path / "data" / "secrets" / "encryption" / "dev.key"
        assert f"Codec server:     http://127.0.0.1:{codec_port}" in banner
        assert f"export {ENV_KEY_FILES}={key_file}" in banner
        assert key_file.read_text().strip() not in banner
        assert key_file.stat().st_mode & 0o077 == 0

        # Stored: encrypted with the stack's key; nothing of the pool readable.
        shown = stack.temporal("workflow", "show", "-w", f"devicepool/{POOL}", "-o", "json")
        assert shown.returncode == 0, shown.stderr
        stored = started_input(json.loads(shown.stdout))
        metadata = {k: base64.b64decode(v) for k, v in stored["metadata"].items()}  # type: ignore[attr-defined]
        assert metadata == {"encoding": b"binary/encrypted", "encryption-key-id": b"dev"}
        for clear in (b"proxyseller-eu", b"eu-west", b"android"):
            assert clear not in base64.b64decode(str(stored["data"]))

        # Readable without a key: the search attributes (the pool columns, filters).
        listed = stack.temporal(
            "workflow", "list", "--query", 'DevicePoolRegion="eu-west"', "-o", "json"
        )
        assert listed.returncode == 0, listed.stderr
        assert f"devicepool/{POOL}" in listed.stdout

        # The devicepool CLI: one line without the key, the pool with it.
        for name in ("TEMPORAL_API_KEY", "TEMPORAL_PROFILE", "TEMPORAL_TLS", "TEMPORAL_NAMESPACE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("TEMPORAL_ADDRESS", stack.address)
        monkeypatch.delenv(ENV_KEY_FILES, raising=False)
        capsys.readouterr()
        assert await asyncio.to_thread(main, ["get", POOL, "-o", "json"]) == 1
        refused = capsys.readouterr().err
        assert refused.startswith("error: history is encrypted (key 'dev')"), refused
        monkeypatch.setenv(ENV_KEY_FILES, str(key_file))
        code = await asyncio.to_thread(main, ["get", POOL, "-o", "json"])
        got = capsys.readouterr()
        assert code == 0, got.err
        assert "eu-west" in got.out

        base = f"http://127.0.0.1:{ui_port}/namespaces/default/workflows"
        async with ui_page(timeout_ms=UI_TIMEOUT_MS) as page:
            decodes: list[str] = []
            page.on(
                "request",
                lambda r: decodes.append(r.url) if r.url.startswith(f"http://127.0.0.1:{codec_port}/decode") else None,
            )  # fmt: skip
            await open_workflow_page(page, base, f"devicepool/{POOL}", UI_TIMEOUT_MS)
            # The Input panel: the pool's start input, decoded by the codec server.
            # (expect()'s own timeout is 5 s, not the page's: a loaded machine needs more.)
            body = page.locator("body")
            await expect(body).to_contain_text('"poolRef": "proxyseller-eu"', timeout=UI_TIMEOUT_MS)
            await expect(body).to_contain_text('"region": "eu-west"', timeout=UI_TIMEOUT_MS)
            await expect(body).to_contain_text(f'"name": "{POOL}"', timeout=UI_TIMEOUT_MS)
            await expect(body).not_to_contain_text(
                "YmluYXJ5L2VuY3J5cHRlZA==", timeout=UI_TIMEOUT_MS
            )
            assert decodes, "the UI never called the codec server"
            await page.screenshot(path=tmp_path / "ui-encrypted-input.png")

            # The summary is encrypted too, and decoded the same way.
            await page.get_by_text("User Metadata", exact=True).first.click()
            summary = page.frame_locator("#user-metadata-summary").locator("body")
            await expect(summary).to_contain_text(POOL, timeout=UI_TIMEOUT_MS)
            await expect(summary).to_contain_text("eu-west", timeout=UI_TIMEOUT_MS)
    finally:
        stop_stack(stack)
