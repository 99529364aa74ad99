"""Structured log lines (logfmt or JSON) with the pool name and workflow id when known.

The formatter lifts the workflow id out of the SDK's `temporal_workflow` / `temporal_activity`
extras and derives the pool name from it; settings hold secrets as `SecretStr`, so none reaches
a line. `core_logging()` forwards the SDK's Rust core lines (coloured on the console by
itself) to the `temporalio.core` logger, so they are formatted here too, without ANSI escapes."""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any

from temporalio.runtime import LogForwardingConfig, LoggingConfig, TelemetryFilter

from devicepool.api.names import pool_name_from_workflow_id

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}
# CSI sequences (colours, cursor moves): ESC [ parameters intermediates final.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
CORE_LOGGER = "temporalio.core"


def core_logging() -> LoggingConfig:
    """The SDK's default levels (core WARN, the rest ERROR), forwarded to `CORE_LOGGER`."""
    return LoggingConfig(
        filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
        forwarding=LogForwardingConfig(logger=logging.getLogger(CORE_LOGGER)),
    )


def _context(record: logging.LogRecord) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for key in ("temporal_workflow", "temporal_activity"):
        info = getattr(record, key, None)
        if isinstance(info, dict):
            workflow_id = info.get("workflow_id")
            if workflow_id:
                fields["workflow_id"] = workflow_id
                pool = pool_name_from_workflow_id(str(workflow_id).split("/provision/")[0])
                if pool:
                    fields["pool"] = pool
            if info.get("activity_type"):
                fields["activity"] = info["activity_type"]
            if info.get("workflow_type"):
                fields["workflow_type"] = info["workflow_type"]
    for key, value in record.__dict__.items():
        if key not in _STANDARD and not key.startswith("temporal_") and not key.startswith("_"):
            fields[key] = value
    return fields


def _logfmt_value(value: Any) -> str:
    text = str(value)
    if text == "" or any(c in text for c in ' ="\\\n\t'):
        return json.dumps(text, ensure_ascii=False)
    return text


def _fields(formatter: logging.Formatter, record: logging.LogRecord) -> dict[str, Any]:
    """One record as its fields, the same for every output format."""
    fields: dict[str, Any] = {
        "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
        "level": record.levelname.lower(),
        "logger": record.name,
        # The SDK appends the context dict to the message text; ours is in fields.
        "msg": record.getMessage().split(" ({'")[0],
    }
    fields.update(_context(record))
    if record.exc_info:
        fields["error"] = formatter.formatException(record.exc_info).strip().splitlines()[-1]
    return {k: _ANSI.sub("", v) if isinstance(v, str) else v for k, v in fields.items()}


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in _fields(self, record).items())


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(_fields(self, record), default=str, ensure_ascii=False)


def setup_logging(fmt: str = "logfmt", level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
