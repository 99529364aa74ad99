"""The payload codec (`devicepool.codec`): round trip, rotation, and the errors a person meets.

Every test goes through the real data converter (`devicepool.connect.data_converter_for`)
with pool models, as the worker and the CLI do; none needs a server.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest
from temporalio.api.common.v1 import Payload

from devicepool.api.v1alpha1 import DevicePool
from devicepool.client.cli import run_cli
from devicepool.codec import (
    ENCODING,
    ENV_KEY_FILES,
    KEY_ID_METADATA,
    DecryptionError,
    EncryptedPayloadGuard,
    EncryptionCodec,
    EncryptionKeyError,
    KeyRing,
    codec_from_env,
)
from devicepool.connect import data_converter_for
from devicepool.testing import pool_manifest
from devicepool.worker.config import ConfigError, build_config

POOL = DevicePool.model_validate(pool_manifest("secret-pool", replicas=7, region="eu-north"))


def key_file(directory: Path, key_id: str, material: bytes | None = None) -> Path:
    path = directory / f"{key_id}.key"
    path.write_text(base64.b64encode(material or os.urandom(32)).decode() + "\n")
    return path


async def encode(ring: KeyRing | None, value: object) -> list[Payload]:
    codec = EncryptionCodec(ring) if ring else EncryptedPayloadGuard()
    return await data_converter_for(codec).encode([value])


async def decode(ring: KeyRing | None, payloads: list[Payload]) -> DevicePool:
    codec = EncryptionCodec(ring) if ring else EncryptedPayloadGuard()
    (value,) = await data_converter_for(codec).decode(payloads, [DevicePool])
    assert isinstance(value, DevicePool)
    return value


async def test_round_trip_hides_the_pool_and_names_the_key(tmp_path: Path) -> None:
    ring = KeyRing.from_files([key_file(tmp_path, "2026-12")])
    payloads = await encode(ring, POOL)
    (payload,) = payloads
    assert payload.metadata["encoding"] == ENCODING
    assert payload.metadata[KEY_ID_METADATA] == b"2026-12"
    # Nothing of the pool is readable in what history stores.
    for clear in (b"secret-pool", b"eu-north", b"android", b"replicas"):
        assert clear not in payload.data
    assert await decode(ring, payloads) == POOL
    # A fresh nonce each time: the same value never encrypts to the same bytes.
    assert (await encode(ring, POOL))[0].data != payload.data


async def test_rotation_newest_encrypts_all_decode(tmp_path: Path) -> None:
    old = key_file(tmp_path, "old")
    new = key_file(tmp_path, "new")
    before = await encode(KeyRing.from_files([old]), POOL)

    rotated = KeyRing.from_files([new, old])
    assert rotated.current == "new"
    assert await decode(rotated, before) == POOL
    after = await encode(rotated, POOL)
    assert after[0].metadata[KEY_ID_METADATA] == b"new"

    # Once the old key is dropped, its payloads are a clear error naming both ids.
    with pytest.raises(DecryptionError, match=r"key 'old', which is not among .*\(new\)"):
        await decode(KeyRing.from_files([new]), before)
    assert await decode(KeyRing.from_files([new]), after) == POOL


async def test_plain_history_still_decodes_once_encryption_is_on(tmp_path: Path) -> None:
    plain = await encode(None, POOL)
    assert plain[0].metadata["encoding"] == b"json/plain"
    assert await decode(KeyRing.from_files([key_file(tmp_path, "k1")]), plain) == POOL


async def test_wrong_key_of_the_same_id_is_a_clear_error(tmp_path: Path) -> None:
    real = os.urandom(32)
    wrong = os.urandom(32)
    payloads = await encode(KeyRing.from_bytes({"k1": real}), POOL)
    with pytest.raises(DecryptionError) as caught:
        await decode(KeyRing.from_bytes({"k1": wrong}), payloads)
    message = str(caught.value)
    assert "key 'k1' does not open" in message
    for material in (real, wrong):
        assert base64.b64encode(material).decode() not in message
        assert material.hex() not in message


async def test_no_key_configured_says_what_to_set() -> None:
    payloads = await encode(KeyRing.from_bytes({"k1": os.urandom(32)}), POOL)
    with pytest.raises(
        DecryptionError, match=f"history is encrypted \\(key 'k1'\\).*{ENV_KEY_FILES}"
    ):
        await decode(None, payloads)
    assert isinstance(codec_from_env({}), EncryptedPayloadGuard)


def test_key_file_problems_name_the_file_not_the_key(tmp_path: Path) -> None:
    with pytest.raises(EncryptionKeyError, match=r"encryption key file .*absent\.key: not found"):
        KeyRing.from_files([tmp_path / "absent.key"])

    short = tmp_path / "short.key"
    short_text = base64.b64encode(b"s3cr3t-but-only-24-bytes").decode()
    short.write_text(short_text)
    with pytest.raises(EncryptionKeyError) as caught:
        KeyRing.from_files([short])
    assert "short.key: expected 32 random bytes in base64" in str(caught.value)
    assert short_text not in str(caught.value)

    garbage = tmp_path / "garbage.key"
    garbage.write_text("this is not base64 at all: hunter2!")
    with pytest.raises(EncryptionKeyError, match=r"garbage\.key: expected 32") as caught2:
        KeyRing.from_files([garbage])
    assert "hunter2" not in str(caught2.value)

    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    a, b = key_file(tmp_path / "x", "same"), key_file(tmp_path / "y", "same")
    with pytest.raises(EncryptionKeyError, match="same key id 'same'"):
        KeyRing.from_files([a, b])


def test_the_ring_never_shows_its_keys(tmp_path: Path) -> None:
    material = os.urandom(32)
    ring = KeyRing.from_files([key_file(tmp_path, "k9", material)])
    for shown in (repr(ring), str(ring), repr(EncryptionCodec(ring))):
        assert "k9" in shown
        assert base64.b64encode(material).decode() not in shown
        assert repr(material) not in shown


def test_worker_config_reads_the_key_files(tmp_path: Path) -> None:
    key_file(tmp_path, "new")
    key_file(tmp_path, "old")
    data = {"encryption": {"keyFiles": ["new.key", "old.key"]}}
    config = build_config(data, source="w.yaml", base_dir=tmp_path, env={})
    assert config.encryption_keys is not None
    assert config.encryption_keys.key_ids == ["new", "old"]
    assert isinstance(config.codec(), EncryptionCodec)
    assert config.describe()["encryption"] == "new,old"

    off = build_config({}, source="w.yaml", base_dir=tmp_path, env={})
    assert isinstance(off.codec(), EncryptedPayloadGuard)
    assert off.describe()["encryption"] == "off"

    # The environment names the files instead of the config (paths as given, `:`-separated).
    env = {ENV_KEY_FILES: f"{tmp_path / 'old.key'}"}
    assert build_config(data, base_dir=tmp_path, env=env).encryption_keys.key_ids == ["old"]  # type: ignore[union-attr]
    # Set but empty is unset: an empty override must not silently turn encryption off.
    empty = build_config(data, base_dir=tmp_path, env={ENV_KEY_FILES: ""})
    assert empty.encryption_keys is not None
    assert empty.encryption_keys.key_ids == ["new", "old"]

    with pytest.raises(ConfigError, match=r"^w.yaml: encryption.keyFiles: .*gone.key: not found$"):
        build_config(
            {"encryption": {"keyFiles": ["gone.key"]}}, source="w.yaml", base_dir=tmp_path, env={}
        )


def test_cli_with_a_missing_key_file_exits_2_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(ENV_KEY_FILES, str(tmp_path / "missing.key"))
    # An address nothing listens on: the key file is checked before any connection.
    monkeypatch.setenv("TEMPORAL_ADDRESS", "127.0.0.1:9")
    assert run_cli(["get"]) == 2
    err = capsys.readouterr().err
    assert err == f"error: encryption key file {tmp_path / 'missing.key'}: not found\n"
