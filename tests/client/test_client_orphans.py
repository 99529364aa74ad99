"""The orphan sweep's settings and command, without a server.

`orphanGraceSeconds` in the worker config (file and environment, one-line
errors), `devicepool dev --orphan-grace-seconds` into the dev worker's config,
and `devicepool orphans` against an unreachable Temporal. The sweep itself is
tested against a dev server in tests/workflows/test_orphan_sweep.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from devicepool.activities.orphan_models import OrphanDevice
from devicepool.client._cli_orphans import orphan_data
from devicepool.client._dev_config import DevOptions, dev_worker_config
from devicepool.client.cli import main
from devicepool.client.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_RUNTIME
from devicepool.worker.config import ConfigError, build_config
from devicepool.workflows.orphans.state import OrphanReport

KEY = "k-very-secret-0002"


def test_the_grace_defaults_to_ten_minutes() -> None:
    assert build_config({}, env={}).orphan_grace_seconds == 600


def test_the_grace_from_the_file_and_the_environment() -> None:
    config = build_config({"intervals": {"orphanGraceSeconds": 120}}, env={})
    assert config.orphan_grace_seconds == 120
    assert config.describe()["orphan_grace_seconds"] == 120
    config = build_config(
        {"intervals": {"orphanGraceSeconds": 120}},
        env={"DEVICEPOOL_ORPHAN_GRACE_SECONDS": "30"},
    )
    assert config.orphan_grace_seconds == 30


@pytest.mark.parametrize(
    ("data", "env", "expected"),
    [
        ({"intervals": {"orphanGraceSeconds": -1}}, {}, "intervals.orphanGraceSeconds"),
        ({"intervals": {"orphanGraceSeconds": "soon"}}, {}, "intervals.orphanGraceSeconds"),
        ({}, {"DEVICEPOOL_ORPHAN_GRACE_SECONDS": "soon"}, "DEVICEPOOL_ORPHAN_GRACE_SECONDS"),
        ({}, {"DEVICEPOOL_ORPHAN_GRACE_SECONDS": "-5"}, "DEVICEPOOL_ORPHAN_GRACE_SECONDS"),
    ],
)
def test_a_bad_grace_is_one_line_naming_the_field(
    data: object, env: dict[str, str], expected: str
) -> None:
    with pytest.raises(ConfigError) as exc:
        build_config(data, env=env, source="devicepool.yaml")
    assert expected in str(exc.value)
    assert "\n" not in str(exc.value)


def test_dev_passes_its_grace_to_the_worker(tmp_path: Path) -> None:
    written = dev_worker_config(
        DevOptions(orphan_grace_seconds=5), accounts=["default"], proxy_pools=[]
    )
    assert written["intervals"]["orphanGraceSeconds"] == 5
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "default.key").write_text(KEY)
    config = build_config(written, base_dir=tmp_path, env={})
    assert config.orphan_grace_seconds == 5
    assert dev_worker_config(DevOptions(), accounts=[], proxy_pools=[])["intervals"][
        "orphanGraceSeconds"
    ] == pytest.approx(600)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_dev_flag_and_the_command_are_there(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "dev", "--help")
    assert code == EXIT_OK and "--orphan-grace-seconds" in out
    code, out, _ = run(capsys, "orphans", "--help")
    assert code == EXIT_OK
    for flag in ("--delete", "--account", "--output"):
        assert flag in out


def test_a_negative_dev_grace_is_refused_before_anything_starts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run(
        capsys, "dev", "--orphan-grace-seconds", "-1", "--data-dir", str(tmp_path / "d")
    )
    assert code == EXIT_BAD_INPUT
    assert err.startswith("error: ") and "--orphan-grace-seconds" in err
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("argv", [["orphans"], ["orphans", "--delete", "--account", "default"]])
def test_orphans_with_temporal_unreachable_is_exit_1_with_one_line(
    capsys: pytest.CaptureFixture[str], unreachable: str, argv: list[str]
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == EXIT_RUNTIME
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert f"cannot reach Temporal at {unreachable}" in err
    assert out == ""


def test_each_orphan_is_shown_with_its_account_age_and_cost_so_far() -> None:
    now = datetime(2026, 1, 1, 12, tzinfo=UTC)
    device = OrphanDevice(
        id="d-1", pool="gone", status="ready", platform="ios", created_at=now - timedelta(hours=5)
    )
    report = OrphanReport(
        account="growth", grace_seconds=600, scan_seconds=150, terminated=[device]
    )
    data = orphan_data([report], now=now)
    (row,) = data["terminated"]
    assert (row["id"], row["account"], row["ageSeconds"], row["costUsd"]) == (
        "d-1",
        "growth",
        5 * 3600,
        pytest.approx(0.5),
    )
    assert data["orphans"] == [] and data["accounts"][0]["account"] == "growth"


def test_every_accounts_orphan_series_starts_at_zero() -> None:
    """A counter series born at 1 is no increase to Prometheus: the first sweep would not alert."""
    from devicepool.activities.metrics import Metrics

    metrics = Metrics()
    metrics.orphan_accounts(["default", "growth"])
    for account in ("default", "growth"):
        for platform in ("android", "ios"):
            value = metrics.registry.get_sample_value(
                "devicepool_orphans_terminated_total", {"account": account, "platform": platform}
            )
            assert value == 0
    metrics.orphan_terminated("growth", "ios")
    assert (
        metrics.registry.get_sample_value(
            "devicepool_orphans_terminated_total", {"account": "growth", "platform": "ios"}
        )
        == 1
    )
