"""`promtool check rules` and `promtool test rules` on deploy/prometheus, and the dashboard's queries."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "devicepool-rules.yaml"
RULE_TESTS = DEPLOY / "prometheus" / "devicepool-rules.test.yaml"
DASHBOARD = DEPLOY / "grafana" / "devicepool-dashboard.json"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool not installed (Debian package `prometheus`; `make test` installs it)")
    return found


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], capture_output=True, text=True, check=False, timeout=60
    )


def test_rules_are_valid() -> None:
    result = run("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "11 rules found" in result.stdout


def test_rule_unit_tests_pass_and_cover_at_least_three_alerts() -> None:
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    assert len(tested) >= 3, tested
    result = run("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_queries_use_only_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert exprs
    names = set(re.findall(r"\b(devicepool_[a-z_]+)", " ".join(exprs)))
    exported = {
        "devicepool_replicas_desired",
        "devicepool_replicas_ready",
        "devicepool_devices",
        "devicepool_reconcile_duration_seconds_bucket",
        "devicepool_api_errors_total",
        "devicepool_api_requests_total",
        "devicepool_replacements_total",
        "devicepool_provisioning_seconds_bucket",
        "devicepool_pool_phase",
        "devicepool_worker_polling",
    }
    assert names <= exported, names - exported
