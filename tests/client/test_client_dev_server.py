"""The Temporal server `devicepool dev` runs: its command line (pure)."""

from __future__ import annotations

from pathlib import Path

from devicepool.client._dev_commands import server_command
from devicepool.client._dev_config import DevOptions


def test_the_dev_server_holds_512_queries_a_workflow_for_lease_waiters(tmp_path: Path) -> None:
    # Lease waiters poll their ticket by query; Temporal holds 1 query a workflow while one of
    # its tasks runs by default and turns the rest away, to be asked again a second later
    # (bench/leases.py: with 1, a free device's grant read in ~1 s at p95 by 25 clients; with
    # 64, 23 s by 400 clients on a pool of 300; with 512, 61 ms).
    command = server_command("temporal", DevOptions(data_dir=tmp_path))
    assert command[:3] == ["temporal", "server", "start-dev"]
    values = [command[i + 1] for i, word in enumerate(command) if word == "--dynamic-config-value"]
    assert values == ["history.MaxBufferedQueryCount=512"]
