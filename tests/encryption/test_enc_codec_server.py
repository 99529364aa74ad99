"""`devicepool codec-server`: the codec protocol the Web UI and `temporal --codec-endpoint` speak.

The app is driven in process through `httpx.ASGITransport` (the real ASGI app,
CORS middleware included); one test runs the real command as a process, as an
operator would, and asks it over HTTP.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.protobuf import json_format
from temporalio.api.common.v1 import Payloads

from devicepool.api.v1alpha1 import DevicePool
from devicepool.client._codec_server import create_app
from devicepool.codec import EncryptionCodec, KeyRing
from devicepool.connect import DATA_CONVERTER, data_converter_for
from devicepool.testing import free_port, pool_manifest, wait_until

UI = "http://127.0.0.1:8233"
POOL = DevicePool.model_validate(pool_manifest("codec-pool", replicas=3))
KEY = os.urandom(32)


def ring(**keys: bytes) -> KeyRing:
    return KeyRing.from_bytes(keys or {"k1": KEY})


def as_json(payloads: Any) -> dict[str, Any]:
    return dict(json_format.MessageToDict(Payloads(payloads=payloads)))


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(EncryptionCodec(ring()), cors_origins=[UI])
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://codec.test"
    ) as client:
        yield client


async def test_decode_gives_the_ui_the_plain_payload(http: httpx.AsyncClient) -> None:
    encrypted = await data_converter_for(EncryptionCodec(ring())).encode([POOL])
    plain = await DATA_CONVERTER.encode([POOL])
    answer = await http.post(
        "/decode",
        json=as_json(encrypted),
        headers={"Origin": UI, "X-Namespace": "default"},
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["access-control-allow-origin"] == UI
    assert answer.json() == as_json(plain)
    data = base64.b64decode(answer.json()["payloads"][0]["data"])
    assert json.loads(data)["metadata"]["name"] == "codec-pool"


async def test_encode_then_decode_round_trips(http: httpx.AsyncClient) -> None:
    plain = as_json(await DATA_CONVERTER.encode([POOL, {"replicas": 80}]))
    encoded = (await http.post("/encode", json=plain)).json()
    for payload in encoded["payloads"]:
        assert base64.b64decode(payload["metadata"]["encoding"]) == b"binary/encrypted"
        assert base64.b64decode(payload["metadata"]["encryption-key-id"]) == b"k1"
    assert (await http.post("/decode", json=encoded)).json() == plain


async def test_cors_preflight_answers_the_ui_and_no_one_else(http: httpx.AsyncClient) -> None:
    asked = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,x-namespace,authorization",
    }
    ok = await http.options("/decode", headers={"Origin": UI, **asked})
    assert ok.status_code == 200, ok.text
    assert ok.headers["access-control-allow-origin"] == UI
    assert "POST" in ok.headers["access-control-allow-methods"]
    allowed = ok.headers["access-control-allow-headers"].lower()
    assert {"content-type", "x-namespace", "authorization"} <= {
        h.strip() for h in allowed.split(",")
    }

    assert "access-control-allow-private-network" not in ok.headers  # not asked

    # A hosted UI calling a codec server on the user's machine (Private Network Access).
    private = {**asked, "Access-Control-Request-Private-Network": "true"}
    hosted = await http.options("/decode", headers={"Origin": UI, **private})
    assert hosted.status_code == 200
    assert hosted.headers["access-control-allow-private-network"] == "true"
    stranger = await http.options("/decode", headers={"Origin": "http://evil.test", **private})
    assert stranger.status_code == 400  # refused: no allow-origin, whatever else it says
    assert "access-control-allow-origin" not in stranger.headers

    other = await http.options("/decode", headers={"Origin": "http://evil.test", **asked})
    assert other.status_code == 400
    assert "access-control-allow-origin" not in other.headers
    posted = await http.post(
        "/decode", json={"payloads": []}, headers={"Origin": "http://evil.test"}
    )
    assert "access-control-allow-origin" not in posted.headers


async def test_a_payload_of_an_unknown_key_is_refused_by_id(http: httpx.AsyncClient) -> None:
    other = os.urandom(32)
    encrypted = await data_converter_for(EncryptionCodec(ring(k2=other))).encode([POOL])
    answer = await http.post("/decode", json=as_json(encrypted), headers={"Origin": UI})
    assert answer.status_code == 422
    assert answer.headers["access-control-allow-origin"] == UI  # the UI can read why
    detail = answer.json()["detail"]
    assert "key 'k2', which is not among the configured keys (k1)" in detail
    for material in (KEY, other):
        assert base64.b64encode(material).decode() not in answer.text

    bad = await http.post("/decode", content=b"not json", headers={"Origin": UI})
    assert bad.status_code == 400
    assert "payloads" in bad.json()["detail"]


@pytest.mark.parametrize("data", [b"", b"abc", b"1234567", b"x" * 12, b"x" * 40])
async def test_a_short_or_mangled_encrypted_payload_is_a_422_not_a_500(
    http: httpx.AsyncClient, data: bytes
) -> None:
    # Under 8 bytes AES-GCM refuses the nonce itself (ValueError, a 500 before); a nonce with no
    # room for a tag, or bytes that are no ciphertext, fail the tag.
    mangled = {
        "payloads": [
            {
                "metadata": {
                    "encoding": base64.b64encode(b"binary/encrypted").decode(),
                    "encryption-key-id": base64.b64encode(b"k1").decode(),
                },
                "data": base64.b64encode(data).decode(),
            }
        ]
    }
    answer = await http.post("/decode", json=mangled, headers={"Origin": UI})
    assert answer.status_code == 422, answer.text
    assert "key 'k1'" in answer.json()["detail"]


@pytest.mark.e2e
def test_the_command_serves_the_ui_with_the_key_files(tmp_path: Path) -> None:
    key = tmp_path / "2026-12.key"
    key.write_text(base64.b64encode(KEY).decode())
    port = free_port()
    origin = "http://127.0.0.1:18233"
    out = tmp_path / "codec.log"
    with out.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "devicepool.client", "codec-server", "--port", str(port),
             "--key-file", str(key), "--cors-origin", origin],
            stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"

        def healthy() -> bool:
            assert process.poll() is None, out.read_text()
            try:
                return httpx.get(f"{base}/healthz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, timeout=30, what="the codec server", every=0.2)
        banner = out.read_text()
        assert f"codec server on {base} (keys 2026-12; encrypts with 2026-12)" in banner
        assert f"--ui-codec-endpoint {base}" in banner
        assert base64.b64encode(KEY).decode() not in banner

        plain = {"payloads": [{"metadata": {"encoding": "anNvbi9wbGFpbg=="}, "data": "e30="}]}
        encoded = httpx.post(f"{base}/encode", json=plain, headers={"Origin": origin}).json()
        assert encoded["payloads"][0]["metadata"]["encryption-key-id"] == "MjAyNi0xMg=="
        decoded = httpx.post(f"{base}/decode", json=encoded, headers={"Origin": origin})
        assert decoded.json() == plain
        assert decoded.headers["access-control-allow-origin"] == origin
    finally:
        process.terminate()
        process.wait(timeout=20)
