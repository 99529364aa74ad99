"""An account's `billing` (worker config): per running minute with a daily cap per device,
in place of `pricePerHour`; one line naming the field when it is wrong."""

from __future__ import annotations

from typing import Any

import pytest

from devicepool.activities.settings import Billing, LedgerConfig
from devicepool.worker.config import ConfigError, build_config

KEY = "k-very-secret-0001"


def config(**fields: Any) -> dict[str, Any]:
    account = {"api": "geelark", "baseUrl": "http://127.0.0.1:1", "apiKeyEnv": "K", **fields}
    return {"accounts": {"g": account}}


def test_per_minute_billing_prices_an_hour_of_running_and_caps_a_day() -> None:
    data = config(billing={"perMinute": 0.007, "dailyCap": 1.0}, spendCap={"maxHourlyCost": 4.2})
    built = build_config(data, env={"K": KEY}, source="w.yaml")
    assert built.settings.price_per_hour("g") == pytest.approx(0.42)
    assert built.settings.billing_of("g") == Billing(model="perMinute", daily_cap=1.0)
    account = built.accounts["g"]
    assert account.billing == Billing(model="perMinute", daily_cap=1.0)
    # The spend cap counts a running phone at its full rate: $4.20/h is 10 phones.
    assert LedgerConfig.of(account).max_devices == 10


def test_monthly_billing_is_refused_since_each_replacement_rents_a_month() -> None:
    """GeeLark charges a monthly phone its month when it is rented, and a pool deletes and
    adds phones (heal, rollout, reset, autoscale): no price an hour bounds that spending, so
    the spend cap could not hold it. Refused, one line naming the field and why."""
    with pytest.raises(ConfigError) as raised:
        build_config(config(billing={"monthly": 9.9}), env={"K": KEY}, source="w.yaml")
    said = str(raised.value)
    assert said.startswith("w.yaml: accounts.g.billing.monthly: ") and "\n" not in said
    assert "month" in said and "perMinute" in said


def test_without_billing_an_account_bills_by_the_hour() -> None:
    built = build_config(config(pricePerHour=0.3), env={"K": KEY}, source="w.yaml")
    assert built.settings.price_per_hour("g") == 0.3
    assert built.settings.billing_of("g") == Billing()


@pytest.mark.parametrize(
    ("billing", "extra", "said"),
    [
        ({}, {}, "accounts.g.billing: give perMinute"),
        ({"perMinute": 0.007, "monthly": 9.9}, {}, "accounts.g.billing.monthly"),
        ({"dailyCap": 1}, {}, "accounts.g.billing: give perMinute"),
        ({"perMinute": -1}, {}, "accounts.g.billing.perMinute"),
        ({"perMinute": float("nan")}, {}, "accounts.g.billing.perMinute"),
        ({"perMinute": 0.007, "dailyCap": -1}, {}, "accounts.g.billing.dailyCap"),
        ({"monthly": 1e300}, {}, "accounts.g.billing.monthly"),
        ({"perHour": 1}, {}, "accounts.g.billing.perHour: unknown field"),
        ({"perMinute": 0.007}, {"pricePerHour": 0.42}, "accounts.g.pricePerHour: not with billing"),
    ],
)
def test_a_wrong_billing_is_one_line_naming_the_field(
    billing: dict[str, Any], extra: dict[str, Any], said: str
) -> None:
    with pytest.raises(ConfigError, match=r"^w.yaml: ") as raised:
        build_config(config(billing=billing, **extra), env={"K": KEY}, source="w.yaml")
    assert said in str(raised.value) and "\n" not in str(raised.value)


def test_billing_is_for_geelark_accounts_only() -> None:
    """Per running minute reads `offline` as shut down: true of GeeLark, not of a Local API
    phone (offline there may be on and billing) nor a REST device. Refused, not undercounted."""
    data = config(billing={"perMinute": 0.007})
    data["accounts"]["g"]["api"] = "rest"
    with pytest.raises(ConfigError, match=r"^w.yaml: accounts.g.billing: only for api: geelark"):
        build_config(data, env={"K": KEY}, source="w.yaml")
