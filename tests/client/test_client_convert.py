"""`devicepool convert -f FILE --to VERSION`: manifests rewritten like `kubectl convert`, comments kept."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from devicepool.api import load_manifests, load_manifests_text
from devicepool.api.conversion import CONVERSION_ANNOTATION
from devicepool.client.cli import main
from devicepool.client.errors import EXIT_BAD_INPUT

ARTICLE = """\
# The article's pool
apiVersion: mobile.example.com/v1alpha1
kind: DevicePool
metadata:
  name: tiktok-us-pool   # one per market
spec:
  provider: bitcloudphone
  platform: android
  region: us-west        # LA
  osVersion: "14"
  replicas: 50
  proxy:
    poolRef: proxyseller-us
    stickyTTL: 900
  providerCredentialRef: default
"""

BETA = """\
apiVersion: mobile.example.com/v1beta1
kind: DevicePool
metadata:
  name: tuned
spec:
  platform: ios
  region: eu-west
  replicas: 3
  health:
    offlineAfter: 2m   # flaky network there
    maxUnhealthy: 1
  scaleDown: {idleGrace: 30s}
"""


def convert(
    capsys: pytest.CaptureFixture[str], *args: str, stdin: str | None = None
) -> tuple[int, str, str]:
    if stdin is not None:
        pytest.MonkeyPatch().setattr("sys.stdin", io.StringIO(stdin))
    code = main(["convert", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_articles_manifest_becomes_v1beta1_with_its_comments(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "pool.yaml"
    path.write_text(ARTICLE)
    code, out, err = convert(capsys, "-f", str(path), "--to", "v1beta1")
    assert code == 0, err
    assert out == (
        "# The article's pool\n"
        "apiVersion: mobile.example.com/v1beta1\n"
        "kind: DevicePool\n"
        "metadata:\n"
        "  name: tiktok-us-pool   # one per market\n"
        "spec:\n"
        "  provider:\n"
        "    name: bitcloudphone\n"
        "    account: default\n"
        "  platform: android\n"
        "  region: us-west        # LA\n"
        '  osVersion: "14"\n'
        "  replicas: 50\n"
        "  proxy:\n"
        "    poolRef: proxyseller-us\n"
        "    sessionTTL: 15m\n"
    )
    assert path.read_text() == ARTICLE  # printed, not rewritten
    assert load_manifests_text(out) == load_manifests(path)


def test_back_to_v1alpha1_keeps_what_it_cannot_say_in_an_annotation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = convert(capsys, "-f", "-", "--to", "v1alpha1", stdin=BETA)
    assert code == 0, err
    assert "apiVersion: mobile.example.com/v1alpha1\n" in out
    assert "  maxUnhealthy: 1\n" in out and "  health:" not in out
    assert CONVERSION_ANNOTATION in out
    # ...and it applies as the same pool, and converts back to the v1beta1 it was.
    assert load_manifests_text(out) == load_manifests_text(BETA)
    code, again, err = convert(capsys, "-f", "-", stdin=out)
    assert code == 0, err
    assert load_manifests_text(again) == load_manifests_text(BETA)
    assert CONVERSION_ANNOTATION not in again


def test_in_place_rewrites_a_directory_json_as_json(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "a.yaml").write_text(ARTICLE)
    manifest = load_manifests_text(BETA)[0].to_json_dict()
    (tmp_path / "b.json").write_text(json.dumps(manifest))
    before = load_manifests(tmp_path)
    code, out, err = convert(capsys, "-f", str(tmp_path), "--to", "v1alpha1", "--in-place")
    assert code == 0, err
    assert out == ""
    assert "# one per market" in (tmp_path / "a.yaml").read_text()
    rewritten = json.loads((tmp_path / "b.json").read_text())
    assert rewritten["apiVersion"] == "mobile.example.com/v1alpha1"
    assert load_manifests(tmp_path) == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--to", "v2"], "error: --to: unsupported 'v2', supported: mobile.example.com/v1alpha1"),
        ([], "error: {dir}/bad.yaml: spec.replicas: must be <= 500, got 501"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_is_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], message: str
) -> None:
    (tmp_path / "a.yaml").write_text(ARTICLE)
    (tmp_path / "bad.yaml").write_text(BETA.replace("replicas: 3", "replicas: 501"))
    code, out, err = convert(capsys, "-f", str(tmp_path), "--in-place", *args)
    assert code == EXIT_BAD_INPUT
    assert err.startswith(message.format(dir=tmp_path)), err
    assert out == ""
    assert (tmp_path / "a.yaml").read_text() == ARTICLE


def test_get_refuses_an_unknown_api_version_before_asking_anyone(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["get", "-o", "yaml", "--api-version", "v2"])
    _, err = capsys.readouterr()
    assert code == EXIT_BAD_INPUT
    assert err.startswith("error: --api-version: unsupported 'v2', supported: "), err
