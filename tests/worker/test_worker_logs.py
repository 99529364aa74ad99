"""The worker's log has no colour codes: Core's lines are forwarded and escapes stripped (issue 28)."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

import devicepool.worker.sdk_metrics
from devicepool.worker.logs import CORE_LOGGER, JsonFormatter, LogfmtFormatter, core_logging

# A line as the SDK's Rust core writes it to a console: dimmed time, yellow level.
COLOURED = (
    "\x1b[2m2026-12-02T14:00:00Z\x1b[0m \x1b[33m WARN\x1b[0m "
    "\x1b[2mtemporal_sdk_core::worker\x1b[0m\x1b[2m:\x1b[0m Network error while polling"
)


def record(msg: str, **extra: Any) -> logging.LogRecord:
    rec = logging.LogRecord(
        f"{CORE_LOGGER}-sdk_core::worker", logging.WARNING, "", 0, msg, None, None
    )
    rec.__dict__.update(extra)
    return rec


@pytest.mark.parametrize("formatter", [LogfmtFormatter(), JsonFormatter()])
def test_colour_codes_are_stripped_from_every_field(formatter: logging.Formatter) -> None:
    line = formatter.format(record(COLOURED, detail="\x1b[31mrefused\x1b[0m"))
    assert "\x1b" not in line
    assert "\\u001b" not in line  # nor escaped in JSON
    assert "Network error while polling" in line
    assert "refused" in line


def test_json_keeps_the_message_whole_but_plain() -> None:
    fields = json.loads(JsonFormatter().format(record(COLOURED)))
    assert fields["msg"] == (
        "2026-12-02T14:00:00Z  WARN temporal_sdk_core::worker: Network error while polling"
    )


def test_core_logs_are_forwarded_to_the_python_logger(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without forwarding, Core writes its own coloured lines to stderr, past the formatter."""
    config = core_logging()
    assert config.forwarding is not None
    assert config.forwarding.logger.name == CORE_LOGGER
    seen: list[Any] = []
    real = devicepool.worker.sdk_metrics.Runtime

    def runtime(*, telemetry: Any) -> Any:
        seen.append(telemetry)
        return real(telemetry=telemetry)

    monkeypatch.setattr(devicepool.worker.sdk_metrics, "Runtime", runtime)
    devicepool.worker.sdk_metrics.sdk_runtime()
    [telemetry] = seen
    assert telemetry.logging.forwarding.logger.name == CORE_LOGGER
