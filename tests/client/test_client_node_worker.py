"""`devicepool worker --node NAME`: its flags, checked before anything is contacted."""

from __future__ import annotations

from pathlib import Path

import pytest

from devicepool.client.cli import main
from devicepool.client.errors import EXIT_BAD_INPUT, EXIT_RUNTIME
from devicepool.worker.config import ConfigError
from devicepool.worker.node import load_node_options


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    _, err = capsys.readouterr()
    return code, err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--node", "Node_1"], "--node: must be a DNS-1123 label"),
        (["--node", "n1", "--node-label", "zone"], "--node-label: must be key=value"),
        (["--node", "n1", "--node-label", "bad key=x"], "--node-label: label key"),
        (["--node", "n1", "--bitbrowser-url", "127.0.0.1:54345"], "--bitbrowser-url: must be"),
        (["--node", "n1", "--node-heartbeat-seconds", "0"], "--node-heartbeat-seconds"),
        (["--node", "n1", "--promote"], "--promote is the main worker's flag"),
        (["--node-label", "zone=a"], "--node-label is a node worker's flag: it needs --node"),
        (["--node", "n1", "--bitbrowser-key-file", "/no/such/key"], "--bitbrowser-key-file"),
    ],
)
def test_a_bad_flag_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], unreachable: str, argv: list[str], said: str
) -> None:
    code, err = run(capsys, "worker", *argv)
    assert code == EXIT_BAD_INPUT
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert said in lines[0]


def test_an_account_without_node_is_passed_by_and_its_secrets_never_read(
    tmp_path: Path,
) -> None:
    """The node reads the file main workers read: an account without `node` is theirs, so the
    node serves it not and never looks for its key (here the file is missing)."""
    config = tmp_path / "node.yaml"
    config.write_text("accounts:\n  a:\n    baseUrl: http://x:1\n    apiKeyFile: missing\n")
    options = load_node_options(
        node="n1", labels=[], bitbrowser_url="http://127.0.0.1:1", config=config, env={}
    )
    assert options.accounts == {}


def test_a_node_serves_its_own_cloud_phone_accounts_over_its_own_local_api(
    tmp_path: Path,
) -> None:
    key = tmp_path / "bb.key"
    key.write_text("bb-key-Qm27\n")
    config = tmp_path / "shared.yaml"
    config.write_text(
        "accounts:\n"
        "  phones:\n    api: bitbrowser\n    node: n1\n    pricePerHour: 0.2\n"
        "  other-phones:\n    api: bitbrowser\n    node: n2\n"
    )
    options = load_node_options(
        node="n1",
        labels=[],
        bitbrowser_url="http://127.0.0.1:54399/",
        key_file=key,
        config=config,
        env={},
    )
    # Another node's account is not served here; its own is, over the flags' URL and key.
    assert set(options.accounts) == {"phones"}
    phones = options.accounts["phones"]
    assert (phones.api, phones.node, phones.base_url) == (
        "bitbrowser",
        "",
        "http://127.0.0.1:54399",
    )
    assert phones.api_key.get_secret_value() == "bb-key-Qm27" and phones.price_per_hour == 0.2
    assert "bb-key-Qm27" not in repr(options) and "bb-key-Qm27" not in repr(phones)


def test_the_shipped_node_example_loads() -> None:
    example = Path(__file__).parents[2] / "examples" / "worker" / "node.yaml"
    options = load_node_options(
        node="node-1",
        labels=["zone=eu", "gpu=yes"],
        bitbrowser_url="http://127.0.0.1:54345",
        config=example,
        env={"PROXYSELLER_EU_PASSWORD": "pw-node-1"},
    )
    assert options.labels == {"zone": "eu", "gpu": "yes"}
    assert set(options.proxy_pools) == {"proxyseller-eu"}
    assert options.proxy_pools["proxyseller-eu"].password.get_secret_value() == "pw-node-1"
    assert "pw-node-1" not in repr(options)
    with pytest.raises(ConfigError, match="--node"):
        load_node_options(node="", labels=[], bitbrowser_url="http://127.0.0.1:54345")


def test_good_flags_get_as_far_as_temporal(
    capsys: pytest.CaptureFixture[str], unreachable: str, tmp_path: Path
) -> None:
    key = tmp_path / "bb.key"
    key.write_text("bb-key-Zx81\n")
    code, err = run(
        capsys,
        "worker",
        "--node",
        "n1",
        "--node-label",
        "zone=a",
        "--bitbrowser-key-file",
        str(key),
    )
    assert code == EXIT_RUNTIME
    assert f"cannot reach Temporal at {unreachable}" in err.strip().splitlines()[-1]
    assert "bb-key-Zx81" not in err
