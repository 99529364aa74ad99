"""`promtool check rules` and `promtool test rules` on deploy/prometheus, and the dashboard's queries."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.helpers.programs import promtool

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "devicepool-rules.yaml"
RULE_TESTS = DEPLOY / "prometheus" / "devicepool-rules.test.yaml"
DASHBOARD = DEPLOY / "grafana" / "devicepool-dashboard.json"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], capture_output=True, text=True, check=False, timeout=60
    )


def test_rules_are_valid() -> None:
    result = run("check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "18 rules found" in result.stdout


def test_rule_unit_tests_pass_and_cover_at_least_three_alerts() -> None:
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    assert len(tested) >= 3, tested
    result = run("test", "rules", str(RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_dashboard_queries_parse(tmp_path: Path) -> None:
    """Each panel's query is valid PromQL (`$pool` is inside a string): promtool parses it
    as a recording rule."""
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{i}", "expr": expr}
                    for i, expr in enumerate(dashboard_exprs())
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(json.dumps(rules))  # JSON is YAML
    result = run("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_tells_the_kinds_apart() -> None:
    """Device counts and profile counts are not summed together: every query of the
    per-pool gauges that are per kind names the kind (the phase table shows it)."""
    per_kind = ("devicepool_replicas_", "devicepool_devices")
    for expr in dashboard_exprs():
        if any(name in expr for name in per_kind):
            assert 'kind="BrowserPool"' in expr or 'kind!="BrowserPool"' in expr, expr
    assert any("devicepool_node_profiles" in e for e in dashboard_exprs())
    assert any('devicepool_devices{kind="BrowserPool"' in e for e in dashboard_exprs())


def test_dashboard_queries_use_only_exported_metrics() -> None:
    exprs = dashboard_exprs()
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
        "devicepool_pools",
        "devicepool_browser_pools",
        "devicepool_node_profiles",
        "devicepool_node_last_beat_timestamp_seconds",
        "devicepool_pool_condition",
        "devicepool_leases_active",
        "devicepool_leases_queued",
        "devicepool_leases_oldest_queued_seconds",
        "devicepool_leases_queue_max_wait_seconds",
        "devicepool_lease_wait_seconds_bucket",
        "devicepool_leases_expired_total",
    }
    assert names <= exported, names - exported


def test_every_alert_has_a_runbook_row() -> None:
    """An alert that pages someone says, in docs/operations.md, what it means and what to do."""
    runbook = (DEPLOY.parent / "docs" / "operations.md").read_text()
    runbook = runbook[runbook.index("### Alert runbook") :]
    alerts = re.findall(r"- alert: (\w+)", RULES.read_text())
    assert len(alerts) == 18, alerts
    assert [a for a in alerts if f"| `{a}`" not in runbook] == []
