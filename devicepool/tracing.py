"""Tracing (opt-in): OpenTelemetry spans from the CLI through the workflows to the provider's HTTP.

On when the standard ``OTEL_*`` environment asks for it (`interceptors_from_env`); the
``devicepool[tracing]`` packages are imported only then, and missing ones are
`TracingUnavailable` (one line, exit 2). No secret reaches a span (`scrub_url`,
`_scrub_span`). Settings and the span tree: docs/operations.md, 'Tracing'."""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from devicepool.errors import EXIT_BAD_INPUT, DevicePoolError

__all__ = [
    "TracingUnavailable",
    "flush",
    "instrument",
    "interceptors_from_env",
    "scrub_url",
    "tracing_requested",
    "uninstrument",
]

EXTRA_HINT = "pip install 'devicepool[tracing]'"
SUPPORTED_EXPORTERS = ("otlp", "console")
REDACTED = "REDACTED"
# Query parameter names whose values never go into a span (api_key, token, X-Signature ...).
_SECRET_NAME = re.compile(
    r"key|token|secret|passw|pwd|sig|auth|credential|session|cookie", re.IGNORECASE
)
# Header attributes (`http.request.header.<name>`) that a capture setting could fill.
_SECRET_HEADERS = ("authorization", "proxy-authorization", "x-api-key", "cookie", "set-cookie")
_URL_ATTRIBUTES = ("url.full", "http.url")

_lock = threading.Lock()
_installed: Any = None  # the process's TracingInterceptor once tracing is on
_provider: Any = None  # the TracerProvider that `interceptors_from_env` made


class TracingUnavailable(DevicePoolError):
    """Tracing was asked for, but cannot be set up as asked (one line: what to install or fix)."""

    exit_code = EXIT_BAD_INPUT


def tracing_requested(env: Mapping[str, str]) -> bool:
    """Does the OpenTelemetry environment ask for traces? Nothing set means no."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = _exporters(env)
    if exporters:
        return exporters != ["none"]
    return bool(
        env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        or env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    )


def _exporters(env: Mapping[str, str]) -> list[str]:
    raw = env.get("OTEL_TRACES_EXPORTER", "")
    return [part.strip().lower() for part in raw.split(",") if part.strip()]


def interceptors_from_env(env: Mapping[str, str]) -> list[Any]:
    """`[TracingInterceptor]` when the environment asks for tracing, else `[]`.

    The first call that finds tracing asked for sets up the process (a
    `TracerProvider` with the configured exporters as the global provider, httpx
    instrumented); later calls return the same interceptor.
    """
    global _installed, _provider
    if not tracing_requested(env):
        return []
    with _lock:
        if _installed is None:
            provider = _provider_from_env(env)
            from opentelemetry import trace

            trace.set_tracer_provider(provider)
            _provider = provider
            _installed = instrument(provider)
        return [_installed]


def _provider_from_env(env: Mapping[str, str]) -> Any:
    exporters = _exporters(env) or ["otlp"]  # an endpoint alone means OTLP
    unknown = [e for e in exporters if e not in (*SUPPORTED_EXPORTERS, "none")]
    if unknown:
        raise TracingUnavailable(
            f"OTEL_TRACES_EXPORTER={','.join(exporters)}: devicepool exports traces with "
            f"{' or '.join(SUPPORTED_EXPORTERS)} (an OpenTelemetry Collector takes OTLP)"
        )
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        raise _missing("opentelemetry-sdk") from None
    # Attributes given here win over the environment's: name the service only when
    # neither OTEL_SERVICE_NAME nor OTEL_RESOURCE_ATTRIBUTES does.
    service = env.get("OTEL_SERVICE_NAME", "").strip()
    if not service and "service.name=" not in env.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        service = "devicepool"
    provider = TracerProvider(
        resource=Resource.create({"service.name": service} if service else {})
    )
    for name in exporters:
        if name == "console":
            provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
        elif name == "otlp":
            provider.add_span_processor(BatchSpanProcessor(_otlp_exporter(env)))
    return provider


def _otlp_exporter(env: Mapping[str, str]) -> Any:
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
    ).strip() or "http/protobuf"
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise TracingUnavailable(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs opentelemetry-exporter-otlp-proto-grpc, "
                "which is not installed (devicepool[tracing] brings http/protobuf: unset the "
                "protocol or install that package)"
            ) from None
        return OTLPSpanExporter()
    if protocol != "http/protobuf":
        raise TracingUnavailable(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: devicepool exports OTLP as "
            "http/protobuf (or grpc with opentelemetry-exporter-otlp-proto-grpc installed)"
        )
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpSpanExporter,
        )
    except ImportError:
        raise _missing("opentelemetry-exporter-otlp-proto-http") from None
    return HttpSpanExporter()


def _missing(package: str) -> TracingUnavailable:
    return TracingUnavailable(
        f"tracing is asked for by the OTEL_* environment, but {package} is not installed: "
        f"{EXTRA_HINT} (or unset OTEL_TRACES_EXPORTER / OTEL_EXPORTER_OTLP_ENDPOINT)"
    )


def instrument(tracer_provider: Any) -> Any:
    """Instrument httpx (provider calls) for `tracer_provider`; the `TracingInterceptor` to put on
    clients. Tests pass a provider with an in-memory exporter; `uninstrument` undoes it."""
    try:
        from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
        from temporalio.contrib.opentelemetry import TracingInterceptor
    except ImportError as err:
        raise _missing(err.name or "opentelemetry-instrumentation-httpx") from None

    HTTPXClientInstrumentor().instrument(
        tracer_provider=tracer_provider,
        request_hook=_hook,
        async_request_hook=_async_hook,
        response_hook=_hook,
        async_response_hook=_async_hook,
    )
    return TracingInterceptor(
        tracer_provider.get_tracer("devicepool"), always_create_workflow_spans=True
    )


def uninstrument() -> None:
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    HTTPXClientInstrumentor().uninstrument()


def flush(timeout_millis: int = 5000) -> None:
    """Export what the process's provider holds (the CLI ends with `os._exit`: no atexit)."""
    if _provider is not None:
        _provider.force_flush(timeout_millis)


def scrub_url(url: str) -> str:
    """`url` without user info, and with every secret-looking query value replaced."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return REDACTED
    netloc = parts.netloc.rsplit("@", 1)[-1]
    query = urlencode(
        [
            (name, REDACTED if _SECRET_NAME.search(name) else value)
            for name, value in parse_qsl(parts.query, keep_blank_values=True)
        ],
        safe="=",
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _scrub_span(span: Any, url: Any) -> None:
    if not span.is_recording():
        return
    attributes = getattr(span, "attributes", None) or {}
    for name in _URL_ATTRIBUTES:
        if name in attributes:
            span.set_attribute(name, scrub_url(str(url)))
    for name in list(attributes):
        if name.startswith(("http.request.header.", "http.response.header.")) and (
            name.rsplit(".", 1)[-1].replace("_", "-") in _SECRET_HEADERS
        ):
            span.set_attribute(name, REDACTED)


def _hook(span: Any, request: Any, *_: Any) -> None:
    _scrub_span(span, request.url)


async def _async_hook(span: Any, request: Any, *_: Any) -> None:
    _scrub_span(span, request.url)
