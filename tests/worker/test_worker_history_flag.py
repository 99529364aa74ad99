"""The worker tells its pools whether it encrypts history (`PoolSettings.history_encrypted`):
the `lease_connect` update answers connect info only then (docs/leases.md, "Connect info")."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from devicepool.codec import ENV_KEY_FILES, EncryptedPayloadGuard, EncryptionCodec, KeyRing
from devicepool.worker.config import build_config
from devicepool.worker.node import NodeOptions


def test_the_flag_follows_the_key_files(tmp_path: Path) -> None:
    (tmp_path / "k.key").write_text(base64.b64encode(os.urandom(32)).decode())
    on = build_config({"encryption": {"keyFiles": ["k.key"]}}, base_dir=tmp_path, env={})
    assert on.settings.history_encrypted
    assert not build_config({}, base_dir=tmp_path, env={}).settings.history_encrypted
    by_env = build_config({}, base_dir=tmp_path, env={ENV_KEY_FILES: str(tmp_path / "k.key")})
    assert by_env.settings.history_encrypted


def test_a_node_worker_knows_its_own_codec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "k.key").write_text(base64.b64encode(os.urandom(32)).decode())
    ring = KeyRing.from_files([tmp_path / "k.key"])
    assert NodeOptions(node="n1", codec=EncryptionCodec(ring)).history_encrypted
    assert not NodeOptions(node="n1", codec=EncryptedPayloadGuard()).history_encrypted
    monkeypatch.delenv(ENV_KEY_FILES, raising=False)
    assert not NodeOptions(node="n1").history_encrypted
    monkeypatch.setenv(ENV_KEY_FILES, str(tmp_path / "k.key"))
    assert NodeOptions(node="n1").history_encrypted  # connects with the environment's codec
