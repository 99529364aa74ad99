"""Idempotent creates: the `Idempotency-Key` rules and the per-account cache of answers.

A create's answer is remembered under `(account, key)` with a fingerprint of
the request (platform and canonical JSON body). The same key with the same
request replays the answer, marked `Idempotent-Replayed: true`; with a
different request it is a 422 `idempotency_key_reused`. Nothing is forgotten
until the emulator is reset (with a state file, not across a restart either:
see `_statefile`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from devicepool.emulator._problems import IDEMPOTENCY_KEY_REUSED, ProblemError, invalid

MAX_IDEMPOTENCY_KEY_LENGTH = 255


@dataclass
class Answer:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class _Remembered:
    fingerprint: str
    answer: Answer


def idempotency_key(header: str | None) -> str:
    """The key from the `Idempotency-Key` header, which every create must carry."""
    key = (header or "").strip()
    if not key:
        raise invalid("the Idempotency-Key header is required")
    if len(key) > MAX_IDEMPOTENCY_KEY_LENGTH:
        raise invalid(f"Idempotency-Key is longer than {MAX_IDEMPOTENCY_KEY_LENGTH} characters")
    return key


def fingerprint(platform: str, body: Any) -> str:
    return platform + "\n" + json.dumps(body, sort_keys=True, separators=(",", ":"))


class IdempotencyCache:
    """Answers of accepted creates, by account and key."""

    def __init__(self) -> None:
        self._remembered: dict[tuple[str, str], _Remembered] = {}

    def replay(self, account: str, key: str, fingerprint: str) -> Answer | None:
        """The remembered answer for this key, or None if the key is new."""
        remembered = self._remembered.get((account, key))
        if remembered is None:
            return None
        if remembered.fingerprint != fingerprint:
            raise ProblemError(
                422,
                IDEMPOTENCY_KEY_REUSED,
                f"Idempotency-Key {key!r} was already used with a different request",
            )
        replay = remembered.answer
        return Answer(replay.status, replay.body, {**replay.headers, "Idempotent-Replayed": "true"})

    def remember(self, account: str, key: str, fingerprint: str, answer: Answer) -> None:
        self._remembered[(account, key)] = _Remembered(fingerprint, answer)
