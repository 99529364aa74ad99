"""Programs some tests run (`promtool`, `prometheus`, `chromium`): found on PATH, or the test
is skipped with how to install it."""

from __future__ import annotations

import shutil

import pytest


def program(name: str, install: str) -> str:
    """`name`'s path on PATH, or skip the test saying `install` (how to get it)."""
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} not installed ({install})")
    return found


def promtool() -> str:
    """Prometheus' `promtool` (a `check` of rules, configs and scrapes)."""
    return program("promtool", "Debian package `prometheus`; `make test` installs it")
