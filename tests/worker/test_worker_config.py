"""Worker configuration: file + environment, one-line errors naming the field, secrets kept secret."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from devicepool import __version__
from devicepool.activities.definitions import CREATE_START_TO_CLOSE_TIMEOUT
from devicepool.activities.settings import LedgerConfig
from devicepool.worker.config import ConfigError, WorkerCapacity, build_config, load_config

KEY = "k-very-secret-0001"


def account(**fields: object) -> dict[str, object]:
    return {"accounts": {"default": {"baseUrl": "http://127.0.0.1:8088", **fields}}}


def test_example_config_parses(tmp_path: Path) -> None:
    example = Path(__file__).parents[2] / "examples" / "worker" / "devicepool.yaml"
    (tmp_path / "bcp").write_text(KEY)
    text = example.read_text().replace("/run/secrets/bitcloudphone-default", str(tmp_path / "bcp"))
    text = text.replace("/run/secrets/proxyseller", str(tmp_path / "bcp"))
    config_file = tmp_path / "devicepool.yaml"
    config_file.write_text(text)
    config = load_config(config_file, env={"BITCLOUDPHONE_GROWTH_KEY": "growth-key"})
    assert sorted(config.accounts) == ["default", "growth"]
    assert config.accounts["default"].api_key.get_secret_value() == KEY
    assert config.accounts["growth"].api_key.get_secret_value() == "growth-key"
    assert config.proxy_pools["proxyseller-us"].port == 10000
    assert config.settings.resync_seconds == 30
    assert config.metrics_port == 9464
    assert config.capacity == WorkerCapacity()


def test_key_file_relative_to_config_and_secret_never_shown(tmp_path: Path) -> None:
    (tmp_path / "key").write_text(f"{KEY}\n")
    config_file = tmp_path / "c.yaml"
    config_file.write_text(
        "accounts:\n  default:\n    baseUrl: http://127.0.0.1:8088/\n    apiKeyFile: key\n"
    )
    config = load_config(config_file, env={})
    account_settings = config.accounts["default"]
    assert account_settings.api_key.get_secret_value() == KEY
    assert account_settings.base_url == "http://127.0.0.1:8088"
    assert KEY not in repr(config)
    assert KEY not in str(config.describe())


def test_environment_overrides_win(tmp_path: Path) -> None:
    config = build_config(
        {**account(apiKeyEnv="K"), "intervals": {"resyncSeconds": 30}},
        env={
            "K": KEY,
            "DEVICEPOOL_RESYNC_SECONDS": "2",
            "DEVICEPOOL_HEALTH_SECONDS": "3",
            "DEVICEPOOL_METRICS_PORT": "0",
        },
    )
    assert config.settings.resync_seconds == 2
    assert config.settings.health_seconds == 3
    assert config.metrics_port == 0


@pytest.mark.parametrize(
    ("data", "env", "expected"),
    [
        ({"acounts": {}}, {}, "acounts: unknown field"),
        (
            account(apiKeyEnv="K", colour="red"),
            {"K": KEY},
            "accounts.default.colour: unknown field",
        ),
        (account(), {}, "accounts.default.apiKeyFile: required"),
        (
            account(apiKeyEnv="K", api="adb"),
            {"K": KEY},
            "accounts.default.api: unknown provider API 'adb' (known: rest, bitbrowser, geelark)",
        ),
        (account(apiKeyEnv="K"), {}, "accounts.default.apiKeyEnv: environment variable K"),
        (account(apiKeyEnv="K"), {"K": "  "}, "accounts.default.apiKeyEnv"),
        (
            {"accounts": {"default": {"baseUrl": "ftp://x", "apiKeyEnv": "K"}}},
            {"K": KEY},
            "accounts.default.baseUrl: must be an http(s) URL",
        ),
        (
            {"accounts": {"default": {"baseUrl": "not a url", "apiKeyEnv": "K"}}},
            {"K": KEY},
            "accounts.default.baseUrl",
        ),
        (
            account(apiKeyEnv="K", createsPerMinute=0),
            {"K": KEY},
            "accounts.default.createsPerMinute",
        ),
        (account(apiKeyEnv="K", pricePerHour=-1), {"K": KEY}, "accounts.default.pricePerHour"),
        (
            account(apiKeyEnv="K", spendCap={"maxDevices": -1}),
            {"K": KEY},
            "accounts.default.spendCap.maxDevices",
        ),
        (
            account(apiKeyEnv="K", spendCap={"devices": 5}),
            {"K": KEY},
            "accounts.default.spendCap.devices: unknown field",
        ),
        (
            {"proxyPools": {"p": {"host": "h", "port": 1, "usernameTemplate": "{user}"}}},
            {},
            "proxyPools.p.usernameTemplate",
        ),
        ({"intervals": {"resyncSeconds": -1}}, {}, "intervals.resyncSeconds"),
        ({}, {"DEVICEPOOL_RESYNC_SECONDS": "soon"}, "DEVICEPOOL_RESYNC_SECONDS"),
        # Not a number of seconds a pass can add to a clock: each made every pool's
        # timer arithmetic overflow (review, issue 38).
        ({"intervals": {"resyncSeconds": float("inf")}}, {}, "intervals.resyncSeconds"),
        ({"intervals": {"healthSeconds": 1e12}}, {}, "intervals.healthSeconds"),
        ({}, {"DEVICEPOOL_RESYNC_SECONDS": "inf"}, "DEVICEPOOL_RESYNC_SECONDS"),
        ({}, {"DEVICEPOOL_GRACEFUL_SHUTDOWN_SECONDS": "nan"}, "DEVICEPOOL_GRACEFUL_SHUTDOWN"),
        ({"capacity": {"maxConcurrentWatches": 0}}, {}, "capacity.maxConcurrentWatches"),
        ({"capacity": {"slots": 5}}, {}, "capacity.slots: unknown field"),
        ({}, {"DEVICEPOOL_MAX_CACHED_WORKFLOWS": "many"}, "DEVICEPOOL_MAX_CACHED_WORKFLOWS"),
        ({}, {"DEVICEPOOL_MAX_CONCURRENT_WATCHES": "0"}, "DEVICEPOOL_MAX_CONCURRENT_WATCHES"),
        ("just a string", {}, "must be a mapping"),
    ],
)
def test_config_errors_are_one_line_naming_the_field(
    data: object, env: dict[str, str], expected: str
) -> None:
    with pytest.raises(ConfigError) as exc:
        build_config(data, env=env, source="devicepool.yaml")
    message = str(exc.value)
    assert expected in message
    assert "\n" not in message
    assert KEY not in message


def test_capacity_defaults_are_sized_for_a_thousand_pools() -> None:
    capacity = build_config({}, env={}).capacity
    # Two watches per pool on their own queue (the pool's and its health check's),
    # with room to spare; a pool and its health check cached each.
    assert capacity.max_concurrent_watches > 2 * 1000
    assert capacity.max_cached_workflows > 2 * 1000
    # The short queue keeps a bounded budget (the SDK's default).
    assert capacity.max_concurrent_activities == 100


def test_capacity_from_the_file_and_the_environment() -> None:
    config = build_config(
        {"capacity": {"maxConcurrentActivities": 50, "maxCachedWorkflows": 300}},
        env={
            "DEVICEPOOL_MAX_CONCURRENT_ACTIVITIES": "20",
            "DEVICEPOOL_MAX_CONCURRENT_WATCHES": "5000",
        },
    )
    assert config.capacity == WorkerCapacity(
        max_concurrent_activities=20, max_concurrent_watches=5000, max_cached_workflows=300
    )
    assert config.describe()["max_concurrent_watches"] == 5000


def test_missing_and_empty_key_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"apiKeyFile: file .* not found"):
        build_config(account(apiKeyFile="nope.key"), base_dir=tmp_path, env={})
    (tmp_path / "empty.key").write_text("\n")
    with pytest.raises(ConfigError, match=r"apiKeyFile: file .* is empty"):
        build_config(account(apiKeyFile="empty.key"), base_dir=tmp_path, env={})


def test_invalid_yaml_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("accounts: [unclosed\n")
    with pytest.raises(ConfigError) as exc:
        load_config(bad, env={})
    assert str(exc.value).startswith(f"{bad}: ")
    assert "\n" not in str(exc.value)


def test_the_scrubber_holds_every_key_and_proxy_password_of_the_config() -> None:
    config = build_config(
        {
            "accounts": {
                "default": {"baseUrl": "http://127.0.0.1:8088", "apiKeyEnv": "K1"},
                "growth": {"baseUrl": "http://127.0.0.1:8089", "apiKeyEnv": "K2"},
            },
            "proxyPools": {
                "us": {"host": "gw.example", "port": 10000, "passwordEnv": "P1"},
                "eu": {"host": "gw.example", "port": 10001, "passwordEnv": "P2"},
                "open": {"host": "gw.example", "port": 10002},  # no password
            },
        },
        env={"K1": KEY, "K2": "k-growth-0002", "P1": "proxy-us-pass", "P2": "proxy-eu-pass"},
    )
    scrubber = config.scrubber()
    text = f"{KEY} k-growth-0002 proxy-us-pass proxy-eu-pass gw.example"
    assert scrubber.scrub(text) == "********** ********** ********** ********** gw.example"
    assert KEY not in repr(scrubber)


# The create activity's start-to-close timeout (workflows/provision/workflow.py schedules it).
LIMIT = CREATE_START_TO_CLOSE_TIMEOUT.total_seconds()


@pytest.mark.parametrize("timeout", [LIMIT, LIMIT + 10, 600])
def test_an_account_timeout_the_create_attempt_cannot_outlive_is_refused(timeout: float) -> None:
    with pytest.raises(ConfigError) as exc:
        build_config(
            account(apiKeyEnv="K", timeoutSeconds=timeout), env={"K": KEY}, source="w.yaml"
        )
    message = str(exc.value)
    assert message.startswith("w.yaml: accounts.default.timeoutSeconds: must be below 20 ")
    assert "start-to-close" in message
    assert "\n" not in message


def test_an_account_timeout_below_the_create_timeout_is_taken() -> None:
    config = build_config(account(apiKeyEnv="K", timeoutSeconds=LIMIT - 0.5), env={"K": KEY})
    assert config.accounts["default"].timeout_seconds == LIMIT - 0.5


def test_the_limit_is_the_start_to_close_timeout_provision_schedules_creates_with() -> None:
    # workflows/provision/workflow.py is read, not imported or changed: the check must follow it.
    tree = ast.parse(
        (Path(__file__).parents[2] / "workflows" / "provision" / "workflow.py").read_text()
    )
    (create,) = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and any(isinstance(a, ast.Attribute) and a.attr == "create_device" for a in node.args)
    ]
    (timeout,) = [k.value for k in create.keywords if k.arg == "start_to_close_timeout"]
    assert ast.unparse(timeout) in (
        f"timedelta(seconds={LIMIT:g})",
        "CREATE_START_TO_CLOSE_TIMEOUT",
    )


def test_the_teardown_and_health_liveness_intervals_reach_the_pools() -> None:
    intervals = {"teardownBlockedAfterSeconds": 20, "healthLivenessSeconds": 45}
    config = build_config({**account(apiKeyEnv="K"), "intervals": intervals}, env={"K": KEY})
    assert config.settings.teardown_blocked_after_seconds == 20
    assert config.settings.health_liveness_seconds == 45


def test_an_account_speaks_rest_unless_it_names_another_provider_api() -> None:
    plain = build_config(account(apiKeyEnv="K"), env={"K": KEY}).accounts["default"]
    named = build_config(account(apiKeyEnv="K", api="rest"), env={"K": KEY}).accounts["default"]
    assert (plain.api, named.api) == ("rest", "rest")


def test_an_account_on_the_bitbrowser_local_api_is_its_cloud_phones() -> None:
    from pydantic import SecretStr

    from devicepool.activities.metrics import Metrics
    from devicepool.activities.providers.bitbrowser.phone_provider import PhoneProvider
    from devicepool.activities.providers.registry import build_provider
    from devicepool.activities.secrets import Scrubber
    from devicepool.activities.settings import AccountSettings

    # A worker config names a node for it (tests/worker/test_worker_config_nodes.py);
    # the node worker, and tests, build the in-process adapter from its settings.
    local = "http://127.0.0.1:54345"
    settings = AccountSettings(
        name="default", api="bitbrowser", base_url=local, api_key=SecretStr(KEY)
    )
    provider = build_provider(settings, metrics=Metrics(), scrubber=Scrubber())
    assert isinstance(provider, PhoneProvider)
    assert provider.phones.pacer.interval == settings.phone_interval_seconds > 1
    assert KEY not in repr(provider)


def test_every_provider_api_the_config_takes_has_an_adapter() -> None:
    from devicepool.activities.providers.base import PROVIDER_APIS
    from devicepool.activities.providers.registry import ADAPTERS

    assert set(PROVIDER_APIS) == set(ADAPTERS)


def test_a_worker_is_unversioned_unless_it_names_a_deployment() -> None:
    from devicepool.worker.config import with_deployment
    from devicepool.worker.versioning import default_build_id, workflow_code_digest

    plain = build_config({}, env={})
    assert (plain.deployment_name, plain.build_id, plain.pinned) == ("", "", True)
    # The default build id changes with the workflow code, so an edited workflow is a new build.
    named = build_config({}, env={"DEVICEPOOL_DEPLOYMENT_NAME": "devicepool"})
    assert named.build_id == default_build_id() == f"{__version__}-{workflow_code_digest()}"
    given = build_config(
        {"deployment": {"name": "dp", "buildId": "b7", "behavior": "autoUpgrade"}}, env={}
    )
    assert (given.deployment_name, given.build_id, given.pinned) == ("dp", "b7", False)
    flags = with_deployment(given, name="dp", build_id="b8")
    assert (flags.deployment_name, flags.build_id) == ("dp", "b8")
    assert with_deployment(plain, name="other").build_id == default_build_id()
    with pytest.raises(ConfigError, match=r"^w.yaml: deployment.name: must not contain a dot"):
        build_config({"deployment": {"name": "a.b"}}, env={}, source="w.yaml")
    with pytest.raises(ConfigError, match=r"deployment.behavior"):
        build_config({"deployment": {"name": "a", "behavior": "sometimes"}}, env={}, source="w")
    with pytest.raises(ConfigError, match=r"^--deployment-name: must not contain a dot"):
        with_deployment(plain, name="x.y")


def test_each_accounts_price_reaches_the_pools(tmp_path: Path) -> None:
    data = {
        "accounts": {
            "default": {"baseUrl": "http://127.0.0.1:1", "apiKeyEnv": "K"},
            "cheap": {"baseUrl": "http://127.0.0.1:2", "apiKeyEnv": "K", "pricePerHour": 0.04},
        }
    }
    settings = build_config(data, env={"K": KEY}, source="devicepool.yaml").settings
    assert settings.account_prices == {"default": 0.10, "cheap": 0.04}
    assert settings.price_per_hour("cheap") == 0.04
    assert settings.price_per_hour("unknown") == 0.10  # the article's figure


def test_an_accounts_spend_cap_reaches_its_ledger_as_devices() -> None:
    data = {
        "accounts": {
            "default": {"baseUrl": "http://127.0.0.1:1", "apiKeyEnv": "K"},
            "capped": {
                "baseUrl": "http://127.0.0.1:2",
                "apiKeyEnv": "K",
                "pricePerHour": 0.2,
                "spendCap": {"maxDevices": 30, "maxHourlyCost": 5},
            },
            "empty": {"baseUrl": "http://127.0.0.1:3", "apiKeyEnv": "K", "spendCap": {}},
        }
    }
    accounts = build_config(data, env={"K": KEY}, source="devicepool.yaml").accounts
    capped = LedgerConfig.of(accounts["capped"])
    assert capped.max_devices == 25  # $5/h at $0.20/h is tighter than 30 devices
    assert capped.cap_text == "maxDevices 30, maxHourlyCost $5/h at $0.2/h a device"
    assert LedgerConfig.of(accounts["default"]).max_devices is None
    assert LedgerConfig.of(accounts["empty"]).max_devices is None  # a cap of nothing is no cap
