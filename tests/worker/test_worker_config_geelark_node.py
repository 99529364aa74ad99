"""`api: geelark` with `node: NAME`: one node worker serves the account, so its request
pacer, its two-hour breaker and its create lock are the account's (issue 41).

Main workers read the config and hold no key; the node worker reads the same account with
its `apiKeyFile`/`appId` and speaks to GeeLark itself. Placement sends every call there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from devicepool.activities.accounts import AccountProviders
from devicepool.api.errors import ErrorType
from devicepool.api.names import account_task_queue, node_phone_task_queue
from devicepool.worker.config import ConfigError, build_config
from devicepool.worker.node import load_node_options, node_phone_activities
from devicepool.workflows.shared.placement import route

KEY = "gl-key-very-secret-41"
APP_ID = "eH6gQR4oHr3FsZpI36La01IW"


def geelark(**fields: Any) -> dict[str, Any]:
    return {
        "accounts": {
            "gl": {"api": "geelark", "appId": APP_ID, "apiKeyFile": "gl.key", **fields},
            "default": {"baseUrl": "http://127.0.0.1:8088", "apiKeyEnv": "K"},
        }
    }


def test_a_main_worker_holds_no_key_of_a_node_served_geelark_account(tmp_path: Path) -> None:
    # The key file is the node's: a main worker never reads it (here it does not exist).
    config = build_config(geelark(node="gl-node"), base_dir=tmp_path, env={"K": "k"})
    account = config.accounts["gl"]
    assert (account.node, account.base_url, account.api_key.get_secret_value()) == (
        "gl-node",
        "",
        "",
    )
    assert config.settings.account_nodes == {"gl": "gl-node"}
    assert "gl@node:gl-node/" in config.describe()["accounts"]


def test_every_call_of_a_node_served_geelark_account_goes_to_the_node(tmp_path: Path) -> None:
    config = build_config(geelark(node="gl-node"), base_dir=tmp_path, env={"K": "k"})
    on_node = route("gl", config.settings)
    queue = node_phone_task_queue("gl-node")
    assert on_node.provider()["task_queue"] == queue
    assert on_node.create()["task_queue"] == queue
    # An account without a node keeps its calls where they were (histories replay).
    assert route("default", config.settings).provider() == {}
    assert route("default", config.settings).create() == {
        "task_queue": account_task_queue("default")
    }


async def test_a_main_worker_never_speaks_to_a_node_served_geelark_account(
    tmp_path: Path,
) -> None:
    config = build_config(geelark(node="gl-node"), base_dir=tmp_path, env={"K": "k"})
    providers = AccountProviders(accounts=config.accounts, proxy_pools={})
    with pytest.raises(Exception) as exc:
        providers._provider("gl")
    assert getattr(exc.value, "type", None) == ErrorType.UNKNOWN_ACCOUNT.value
    await providers.aclose()


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"node": "GL_node"}, "accounts.gl.node: must be a DNS-1123 label"),
        ({"node": ""}, "accounts.gl.node: must not be empty"),
        (
            {"node": "n1", "apiKeyFile": None},
            "accounts.gl.apiKeyFile: required with node (the node worker reads the key",
        ),
    ],
)
def test_a_wrong_geelark_node_account_is_one_line_naming_the_field(
    tmp_path: Path, fields: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ConfigError) as exc:
        build_config(geelark(**fields), base_dir=tmp_path, env={"K": KEY}, source="w.yaml")
    message = str(exc.value)
    assert message.startswith("w.yaml: ") and expected in message, message
    assert "\n" not in message and KEY not in message


def _node_config(tmp_path: Path, **fields: Any) -> Path:
    (tmp_path / "gl.key").write_text(KEY + "\n")
    config = tmp_path / "shared.yaml"
    lines = ["accounts:", "  gl:", "    api: geelark", f"    appId: {APP_ID}"]
    lines += [f"    {k}: {v}" for k, v in fields.items()]
    lines += ["  phones:", "    api: bitbrowser", "    node: gl-node"]
    config.write_text("\n".join(lines) + "\n")
    return config


def test_the_node_worker_serves_the_geelark_account_with_its_own_key(tmp_path: Path) -> None:
    config = _node_config(tmp_path, node="gl-node", apiKeyFile="gl.key", windowSeconds=6)
    options = load_node_options(
        node="gl-node",
        labels=[],
        bitbrowser_url="http://127.0.0.1:54399",
        config=config,
        env={},
    )
    gl = options.accounts["gl"]
    # Spoken to here, at GeeLark (not the node's Local API), with the file's key.
    assert (gl.api, gl.node, gl.base_url, gl.app_id) == (
        "geelark",
        "",
        "https://openapi.geelark.com",
        APP_ID,
    )
    assert gl.api_key.get_secret_value() == KEY and gl.window_seconds == 6
    assert KEY not in repr(options) and KEY not in repr(gl)
    # A BitBrowser account on the same node still goes over the node's Local API.
    assert options.accounts["phones"].base_url == "http://127.0.0.1:54399"
    activities = node_phone_activities(options)
    assert activities is not None
    assert type(activities._provider("gl")).__name__ == "GeeLarkProvider"


def test_a_node_that_cannot_read_the_geelark_key_says_which_field(tmp_path: Path) -> None:
    config = _node_config(tmp_path, node="gl-node", apiKeyFile="missing.key")
    with pytest.raises(ConfigError) as exc:
        load_node_options(
            node="gl-node", labels=[], bitbrowser_url="http://127.0.0.1:54399", config=config
        )
    assert "accounts.gl.apiKeyFile" in str(exc.value) and "\n" not in str(exc.value)


def _shipped_geelark_block() -> tuple[list[str], int, list[str]]:
    """The shipped example's lines, where its commented GeeLark-by-node block starts, and
    that block uncommented (as `accounts.geelark`, its trailing comments dropped)."""
    example = Path(__file__).parents[2] / "examples" / "worker" / "devicepool.yaml"
    lines = example.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  # geelark:"))
    block = ["  geelark:"]
    for line in lines[start + 1 :]:
        if not line.startswith("  #   "):
            break
        block.append("    " + line[len("  #   ") :].split("  #", 1)[0].rstrip())
    return lines, start, block


def test_the_shipped_geelark_by_node_example_loads_on_both_sides(tmp_path: Path) -> None:
    _, _, block = _shipped_geelark_block()
    (tmp_path / "geelark.key").write_text(KEY)
    text = "accounts:\n" + "\n".join(block) + "\n"
    text = text.replace("/run/secrets/geelark", "geelark.key")
    config = tmp_path / "w.yaml"
    config.write_text(text)
    main = build_config(yaml.safe_load(text), base_dir=tmp_path / "none", env={})
    assert main.settings.account_nodes == {"geelark": "gl-node"}
    node = load_node_options(
        node="gl-node", labels=[], bitbrowser_url="http://127.0.0.1:1", config=config, env={}
    )
    assert node.accounts["geelark"].api_key.get_secret_value() == KEY


def test_the_node_reads_the_whole_shipped_example_and_serves_only_its_own(
    tmp_path: Path,
) -> None:
    """docs/providers.md: main workers and the node worker read the same file. The shipped
    example whole, its GeeLark-by-node block uncommented: main workers serve its REST
    accounts, the node `gl-node` serves `geelark` alone and reads no other account's key."""
    lines, start, block = _shipped_geelark_block()
    text = "\n".join(lines[:start] + block + lines[start + len(block) :]) + "\n"
    for secret in ("geelark", "bitcloudphone-default", "proxyseller"):
        (tmp_path / secret).write_text(KEY if secret == "geelark" else "s3cret")
        text = text.replace(f"/run/secrets/{secret}", str(tmp_path / secret))
    config = tmp_path / "devicepool.yaml"
    config.write_text(text)
    env = {"BITCLOUDPHONE_GROWTH_KEY": "growth-key"}
    main = build_config(yaml.safe_load(text), base_dir=tmp_path, env=env)
    assert set(main.accounts) == {"default", "growth", "geelark"}
    assert main.settings.account_nodes == {"geelark": "gl-node"}
    # The node is not given the REST account's environment key: it never looks for it.
    node = load_node_options(
        node="gl-node", labels=[], bitbrowser_url="http://127.0.0.1:1", config=config, env={}
    )
    assert set(node.accounts) == {"geelark"}
    assert node.accounts["geelark"].api_key.get_secret_value() == KEY


def test_a_node_serving_only_geelark_without_a_local_api_beats_no_browsers(
    tmp_path: Path,
) -> None:
    """No `--bitbrowser-url` and GeeLark accounts only: no desktop client here, so the beat
    says `browsers: false` and BrowserPools leave the node out. Given the flag, or serving a
    BitBrowser account, or no account at all (a BrowserPool node on the default URL), it
    serves browsers, as every node did."""
    (tmp_path / "gl.key").write_text(KEY + "\n")
    only = tmp_path / "only.yaml"
    only.write_text(
        f"accounts:\n  gl:\n    api: geelark\n    node: gl-node\n    appId: {APP_ID}\n"
        "    apiKeyFile: gl.key\n"
    )

    def beat(**given: Any) -> bool:
        options = load_node_options(node="gl-node", labels=[], env={}, **given)
        return options.beat().browsers

    assert beat(bitbrowser_url=None, config=only) is False
    assert beat(bitbrowser_url="http://127.0.0.1:54345", config=only) is True
    assert (
        beat(
            bitbrowser_url=None, config=_node_config(tmp_path, node="gl-node", apiKeyFile="gl.key")
        )
        is True
    )
    assert beat(bitbrowser_url=None) is True
