"""The Temporal server `devicepool dev` runs: its command line (pure)."""

from __future__ import annotations

from pathlib import Path

from devicepool.client._dev_commands import server_command
from devicepool.client._dev_config import DevOptions


def test_the_dev_server_holds_64_queries_a_workflow_for_lease_waiters(tmp_path: Path) -> None:
    # Lease waiters poll their ticket by query; Temporal holds 1 query a workflow while one of
    # its tasks runs by default and turns the rest away, to be asked again a second later
    # (bench/leases.py: p95 of a free device's grant ~1 s with 1, 26 ms with 64).
    command = server_command("temporal", DevOptions(data_dir=tmp_path))
    assert command[:3] == ["temporal", "server", "start-dev"]
    values = [command[i + 1] for i, word in enumerate(command) if word == "--dynamic-config-value"]
    assert values == ["history.MaxBufferedQueryCount=64"]
