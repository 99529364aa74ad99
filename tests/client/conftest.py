"""Fixtures the CLI tests share."""

from __future__ import annotations

import pytest

from devicepool.testing import free_port


@pytest.fixture
def unreachable(monkeypatch: pytest.MonkeyPatch) -> str:
    """TEMPORAL_ADDRESS at a port nothing listens on, and no other Temporal setting of the
    environment: a command that dials Temporal fails to connect; one that must exit before
    dialling (a bad manifest, a bad flag) shows it did. Returns the address."""
    address = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("TEMPORAL_ADDRESS", address)
    for name in ("TEMPORAL_API_KEY", "TEMPORAL_PROFILE", "TEMPORAL_TLS", "TEMPORAL_NAMESPACE"):
        monkeypatch.delenv(name, raising=False)
    return address
