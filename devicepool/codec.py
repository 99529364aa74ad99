"""Encrypted history (opt-in): an AES-256-GCM payload codec with key ids and rotation.

A key ring is key files (32 random bytes in base64, id = file name without the suffix); the
first encrypts, every one decodes. Needs the ``devicepool[encryption]`` extra, imported only
when a ring is loaded. A missing or malformed key file is `EncryptionKeyError` (bad input,
exit 2); a payload no configured key opens is `DecryptionError`; neither message carries key
material. Format, rotation, what stays readable: docs/operations.md, 'Encrypted history'."""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from devicepool.errors import EXIT_BAD_INPUT, DevicePoolError

__all__ = [
    "ENCODING",
    "ENV_KEY_FILES",
    "KEY_ID_METADATA",
    "DecryptionError",
    "EncryptedPayloadGuard",
    "EncryptionCodec",
    "EncryptionKeyError",
    "KeyRing",
    "codec_from_env",
    "key_files_from_env",
]

ENV_KEY_FILES = "DEVICEPOOL_ENCRYPTION_KEY_FILES"
ENCODING = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12
_KEY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
EXTRA_HINT = "pip install 'devicepool[encryption]'"


class EncryptionKeyError(DevicePoolError):
    """A key file is missing, unreadable or malformed (names the file, never its content)."""

    exit_code = EXIT_BAD_INPUT


class DecryptionError(DevicePoolError):
    """An encrypted payload that the configured keys do not open."""


@dataclass(frozen=True)
class _Key:
    key_id: str
    source: str
    material: bytes = field(repr=False)


class KeyRing:
    """Keys by id, the first one the key that encrypts. Its repr shows ids and files only."""

    def __init__(self, keys: Sequence[_Key]) -> None:
        if not keys:
            raise EncryptionKeyError("encryption: no key files given")
        seen: dict[str, _Key] = {}
        for key in keys:
            if key.key_id in seen:
                raise EncryptionKeyError(
                    f"encryption key files {seen[key.key_id].source} and {key.source} have the "
                    f"same key id {key.key_id!r} (the file name without its suffix): rename one"
                )
            seen[key.key_id] = key
        self._keys = seen
        self.current = keys[0].key_id

    @classmethod
    def from_files(cls, paths: Sequence[str | os.PathLike[str]]) -> KeyRing:
        return cls([_read_key(Path(p)) for p in paths])

    @classmethod
    def from_bytes(cls, keys: Mapping[str, bytes]) -> KeyRing:
        """For tests and tools: `{key_id: 32 bytes}`, the first entry encrypting."""
        ring = []
        for key_id, material in keys.items():
            _check_id(key_id, f"key id {key_id!r}")
            if len(material) != KEY_BYTES:
                raise EncryptionKeyError(f"key {key_id!r}: must be {KEY_BYTES} bytes")
            ring.append(_Key(key_id, f"<key {key_id}>", material))
        return cls(ring)

    @property
    def key_ids(self) -> list[str]:
        return list(self._keys)

    def material(self, key_id: str) -> bytes | None:
        key = self._keys.get(key_id)
        return key.material if key else None

    def __repr__(self) -> str:
        return f"KeyRing(encrypts={self.current!r}, keys={self.key_ids!r})"


def _check_id(key_id: str, where: str) -> None:
    if not _KEY_ID.match(key_id):
        raise EncryptionKeyError(
            f"{where}: a key id is 1-64 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit"
        )


def _read_key(path: Path) -> _Key:
    key_id = path.stem
    _check_id(key_id, f"encryption key file {path} (its key id {key_id!r})")
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        raise EncryptionKeyError(f"encryption key file {path}: not found") from None
    except IsADirectoryError:
        raise EncryptionKeyError(f"encryption key file {path}: is a directory") from None
    except PermissionError:
        raise EncryptionKeyError(f"encryption key file {path}: permission denied") from None
    except (OSError, UnicodeDecodeError):
        raise EncryptionKeyError(
            f"encryption key file {path}: unreadable or not base64 text"
        ) from None
    try:
        material = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        material = b""
    if len(material) != KEY_BYTES:
        raise EncryptionKeyError(
            f"encryption key file {path}: expected {KEY_BYTES} random bytes in base64 "
            "(make one with `openssl rand -base64 32`)"
        )
    return _Key(key_id, str(path), material)


def key_files_from_env(env: Mapping[str, str]) -> list[str]:
    """`DEVICEPOOL_ENCRYPTION_KEY_FILES`: paths separated by `:`, the first encrypting."""
    raw = env.get(ENV_KEY_FILES, "")
    return [part.strip() for part in raw.split(os.pathsep) if part.strip()]


def _aesgcm(material: bytes) -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise EncryptionKeyError(
            f"encryption needs the `cryptography` package, which is not installed: {EXTRA_HINT}"
        ) from None
    return AESGCM(material)


def _key_id(payload: Payload) -> str | None:
    """The key id of an encrypted payload; None for a plain one."""
    if payload.metadata.get("encoding") != ENCODING:
        return None
    return payload.metadata.get(KEY_ID_METADATA, b"").decode("utf-8", "replace")


class EncryptionCodec(PayloadCodec):
    """Encrypts with the ring's first key, decrypts with whichever key a payload names.

    A plain payload (history from before encryption was turned on) decodes unchanged.
    """

    def __init__(self, keys: KeyRing) -> None:
        self.keys = keys
        self._ciphers = {key_id: _aesgcm(keys.material(key_id) or b"") for key_id in keys.key_ids}

    def __repr__(self) -> str:
        return f"EncryptionCodec({self.keys!r})"

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        key_id = self.keys.current
        cipher = self._ciphers[key_id]
        out = []
        for payload in payloads:
            nonce = os.urandom(NONCE_BYTES)
            sealed = cipher.encrypt(nonce, payload.SerializeToString(), key_id.encode())
            out.append(
                Payload(
                    metadata={"encoding": ENCODING, KEY_ID_METADATA: key_id.encode()},
                    data=nonce + sealed,
                )
            )
        return out

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._open(p) for p in payloads]

    def _open(self, payload: Payload) -> Payload:
        key_id = _key_id(payload)
        if key_id is None:
            return payload
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise DecryptionError(
                f"a payload is encrypted with key {key_id!r}, which is not among the "
                f"configured keys ({', '.join(self.keys.key_ids)}): add its key file to "
                f"{ENV_KEY_FILES} / encryption.keyFiles"
            )
        from cryptography.exceptions import InvalidTag

        try:
            # Under 8 bytes, AES-GCM refuses the nonce itself with a ValueError: the same
            # verdict as a failed tag (a 422 from the codec server, not a 500).
            plain = cipher.decrypt(
                payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:], key_id.encode()
            )
        except (InvalidTag, ValueError):
            raise DecryptionError(
                f"a payload encrypted with key {key_id!r} does not open with the configured key "
                f"of that id: its key file holds another key, or the payload was altered"
            ) from None
        return Payload.FromString(plain)


class EncryptedPayloadGuard(PayloadCodec):
    """The codec of a process configured without keys: plain payloads pass, encrypted ones
    fail with a line that says what to configure (instead of "unknown payload encoding")."""

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return list(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        for payload in payloads:
            key_id = _key_id(payload)
            if key_id is not None:
                raise DecryptionError(
                    f"history is encrypted (key {key_id!r}) and no key is configured: set "
                    f"{ENV_KEY_FILES} to the key files (see docs/operations.md, Encrypted history)"
                )
        return list(payloads)


def codec_from_env(env: Mapping[str, str]) -> PayloadCodec:
    """The codec of a process: `EncryptionCodec` when the environment names key files, else the
    guard. Raises `EncryptionKeyError` for a missing or malformed key file."""
    files = key_files_from_env(env)
    if not files:
        return EncryptedPayloadGuard()
    return EncryptionCodec(KeyRing.from_files(files))
