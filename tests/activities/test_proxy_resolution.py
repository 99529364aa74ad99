from __future__ import annotations

import pytest
from pydantic import SecretStr

from devicepool.activities.models import ProxyPoolSettings
from devicepool.activities.proxy import resolve_proxy, session_id

POOL = ProxyPoolSettings(
    name="proxyseller-us",
    type="http",
    host="gw.example",
    port=10000,
    username_template="cust-abc-session-{session}-ttl-{ttl}",
    password=SecretStr("hunter2"),
)


def test_same_key_same_body_other_key_other_session() -> None:
    first = resolve_proxy(POOL, idempotency_key="devicepool:p:g1:s0", ttl=900).body()
    again = resolve_proxy(POOL, idempotency_key="devicepool:p:g1:s0", ttl=900).body()
    other = resolve_proxy(POOL, idempotency_key="devicepool:p:g1:s1", ttl=900).body()
    assert first == again
    assert first["username"] != other["username"]
    sid = session_id("devicepool:p:g1:s0")
    assert first == {
        "type": "http",
        "host": "gw.example",
        "port": 10000,
        "username": f"cust-abc-session-{sid}-ttl-900",
        "password": "hunter2",
    }
    assert len(sid) == 16
    assert sid.isalnum()


def test_the_password_is_not_in_repr() -> None:
    resolved = resolve_proxy(POOL, idempotency_key="k", ttl=0)
    assert "hunter2" not in repr(resolved)
    assert "hunter2" not in str(resolved)


def test_unknown_template_fields_are_refused() -> None:
    bad = POOL.model_copy(update={"username_template": "u-{session}-{country}"})
    with pytest.raises(ValueError, match="country"):
        resolve_proxy(bad, idempotency_key="k", ttl=0)
