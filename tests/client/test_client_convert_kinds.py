"""`devicepool convert` for both kinds, a directory that holds worker configs too, and what the
author left out staying out (issue 43, items 5 and 12)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from devicepool.api import load_resources, load_resources_text
from devicepool.client.cli import main
from devicepool.client.errors import EXIT_BAD_INPUT

REPO = Path(__file__).resolve().parents[2]

BROWSERS_ALPHA = """\
# Shop browsers
apiVersion: mobile.example.com/v1alpha1
kind: BrowserPool
metadata:
  name: shop-eu   # one per shop
spec:
  replicas: 6                  # 0..500 profiles
  nodeSelector: {zone: eu}
  proxy:
    poolRef: proxyseller-eu    # the node's pool
    stickyTTL: 900
"""

BROWSERS_BETA = """\
# Shop browsers
apiVersion: mobile.example.com/v1beta1
kind: BrowserPool
metadata:
  name: shop-eu   # one per shop
spec:
  replicas: 6                  # 0..500 profiles
  nodeSelector: {zone: eu}
  proxy:
    poolRef: proxyseller-eu    # the node's pool
    sessionTTL: 15m
"""

# v1alpha1 without `providerCredentialRef`, `maxUnhealthy` or `stickyTTL`: the defaults.
DEVICES_ALPHA = """\
apiVersion: mobile.example.com/v1alpha1
kind: DevicePool
metadata:
  name: quick
spec:
  provider: bitcloudphone
  platform: android
  region: us-west   # LA
  replicas: 5
  proxy:
    poolRef: proxyseller-us
"""

DEVICES_BETA = """\
apiVersion: mobile.example.com/v1beta1
kind: DevicePool
metadata:
  name: quick
spec:
  provider:
    name: bitcloudphone
  platform: android
  region: us-west   # LA
  replicas: 5
  proxy:
    poolRef: proxyseller-us
"""


def convert(
    capsys: pytest.CaptureFixture[str],
    *args: str,
    stdin: str | None = None,
    monkeypatch: pytest.MonkeyPatch | None = None,
) -> tuple[int, str, str]:
    if stdin is not None:
        assert monkeypatch is not None
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = main(["convert", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("source", "to", "expected"),
    [
        (BROWSERS_ALPHA, "v1beta1", BROWSERS_BETA),
        (BROWSERS_BETA, "v1alpha1", BROWSERS_ALPHA),
        (DEVICES_ALPHA, "v1beta1", DEVICES_BETA),
        (DEVICES_BETA, "v1alpha1", DEVICES_ALPHA),
        (DEVICES_ALPHA, "v1alpha1", DEVICES_ALPHA),
        (DEVICES_BETA, "v1beta1", DEVICES_BETA),
        (BROWSERS_BETA, "v1beta1", BROWSERS_BETA),
    ],
    ids=[
        "browsers-to-beta",
        "browsers-to-alpha",
        "devices-to-beta",
        "devices-to-alpha",
        "devices-alpha-as-is",
        "devices-beta-as-is",
        "browsers-beta-as-is",
    ],
)
def test_convert_rewrites_what_was_written_and_adds_no_default(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    source: str,
    to: str,
    expected: str,
) -> None:
    """Was: `kind: unsupported 'BrowserPool'`; and a DevicePool gained `account: default`,
    `stickyTTL: 0` or `sessionTTL: 0s` the author never wrote."""
    path = tmp_path / "pool.yaml"
    path.write_text(source)
    code, out, err = convert(capsys, "-f", str(path), "--to", to)
    assert (code, err) == (0, "")
    assert out == expected
    assert load_resources_text(out) == load_resources_text(source)


def test_a_default_the_author_wrote_stays(capsys: pytest.CaptureFixture[str]) -> None:
    text = DEVICES_ALPHA.replace(
        "  replicas: 5\n", "  replicas: 5\n  providerCredentialRef: default\n"
    )
    pytest.MonkeyPatch().setattr("sys.stdin", io.StringIO(text))
    code = main(["convert", "-f", "-", "--to", "v1beta1"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "  provider:\n    name: bitcloudphone\n    account: default\n" in out


def test_a_directory_converts_both_kinds_and_passes_worker_configs_by(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Was: `kind: unsupported 'BrowserPool'`, and a worker config reported as a manifest
    without `apiVersion`."""
    (tmp_path / "browsers.yaml").write_text(BROWSERS_ALPHA)
    (tmp_path / "devices.yaml").write_text(DEVICES_ALPHA)
    for name in ("devicepool.yaml", "node.yaml"):
        (tmp_path / f"worker-{name}").write_text((REPO / "examples/worker" / name).read_text())
    before = {p.name: p.read_text() for p in tmp_path.iterdir()}
    pools = load_resources_text(BROWSERS_ALPHA + "---\n" + DEVICES_ALPHA)
    code, out, err = convert(capsys, "-f", str(tmp_path), "--to", "v1beta1", "--in-place")
    assert code == 0, err
    assert out == ""
    assert err.splitlines() == [
        f"{tmp_path}/worker-devicepool.yaml: skipped: a worker config, not a manifest",
        f"{tmp_path}/worker-node.yaml: skipped: a worker config, not a manifest",
        f"{tmp_path}/browsers.yaml: written in mobile.example.com/v1beta1",
        f"{tmp_path}/devices.yaml: written in mobile.example.com/v1beta1",
    ]
    assert (tmp_path / "browsers.yaml").read_text() == BROWSERS_BETA
    assert (tmp_path / "devices.yaml").read_text() == DEVICES_BETA
    for name in ("worker-devicepool.yaml", "worker-node.yaml"):
        assert (tmp_path / name).read_text() == before[name]
    assert (
        load_resources(tmp_path / "browsers.yaml") + load_resources(tmp_path / "devices.yaml")
        == pools
    )


def test_the_examples_directory_converts(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = convert(capsys, "-f", str(REPO / "examples"), "--to", "v1beta1")
    assert code == 0, err
    assert "kind: BrowserPool\n" in out and "kind: DevicePool\n" in out
    assert load_resources_text(out) == load_resources(REPO / "examples")


@pytest.mark.parametrize("name", ["devicepool.yaml", "node.yaml"])
def test_a_worker_config_given_by_name_is_still_an_error(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    path = REPO / "examples/worker" / name
    code, out, err = convert(capsys, "-f", str(path))
    assert code == EXIT_BAD_INPUT
    assert out == ""
    assert err == (
        f"error: {path}: a worker config (devicepool worker --config), not a manifest:"
        " nothing to convert\n"
    )


def test_a_directory_of_worker_configs_alone_has_nothing_to_convert(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "node.yaml").write_text((REPO / "examples/worker/node.yaml").read_text())
    code, out, err = convert(capsys, "-f", str(tmp_path))
    assert code == EXIT_BAD_INPUT
    assert out == ""
    assert err.splitlines() == [
        f"{tmp_path}/node.yaml: skipped: a worker config, not a manifest",
        f"error: {tmp_path}: no manifests to convert",
    ]


def test_a_file_without_kind_that_is_no_worker_config_is_still_a_bad_manifest(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "a.yaml").write_text(DEVICES_ALPHA)
    (tmp_path / "b.yaml").write_text("metadata: {name: x}\nspec: {replicas: 1}\n")
    code, out, err = convert(capsys, "-f", str(tmp_path), "--in-place")
    assert (code, out) == (EXIT_BAD_INPUT, "")
    assert f"  {tmp_path}/b.yaml: apiVersion: required\n" in err, err
    assert (tmp_path / "a.yaml").read_text() == DEVICES_ALPHA
