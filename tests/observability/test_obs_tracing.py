"""Tracing (`devicepool.tracing`): one scale-up is one trace, and no secret reaches a span.

The end-to-end test runs its own stack, since the worker must be built from a
traced client: a dev server, the emulator over real HTTP (the httpx
instrumentation wraps the HTTP transport) and the production `run_worker`, on
a client that `devicepool.connect` made with the interceptor `tracing.instrument`
returns for a `TracerProvider` writing to the OpenTelemetry SDK's in-memory
exporter. The rest checks the environment switch and the scrubbing alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request, Response
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from devicepool import tracing
from devicepool.api.loader import parse_pool
from devicepool.client.pool_client import PoolClient
from devicepool.connect import connect
from devicepool.testing import eventually, free_port, pool_manifest
from devicepool.worker.main import run_worker
from tests.helpers.obs_stack import emulator_server, worker_config, worker_serves
from tests.helpers.servers import InProcessServer, dev_server

API_KEY = "trace-test-key-0123456789"
PROXY_PASSWORD = "trace-proxy-password"
POOL = "traced-pool"


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[InMemorySpanExporter, Any]]:
    """httpx instrumented for an in-memory provider, with every request header captured
    (an operator's `.*` capture setting): the scrubbing must still keep credentials out."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_REQUEST", ".*")
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    interceptor = tracing.instrument(provider)
    try:
        yield memory, interceptor
    finally:
        tracing.uninstrument()
        provider.shutdown()


def collector(received: list[ExportTraceServiceRequest]) -> FastAPI:
    """An OTLP/HTTP trace receiver (what an OpenTelemetry Collector listens with on 4318)."""
    app = FastAPI()

    @app.post("/v1/traces")
    async def traces(request: Request) -> Response:
        received.append(ExportTraceServiceRequest.FromString(await request.body()))
        return Response(b"", media_type="application/x-protobuf")

    return app


def serve(app: Any, port: int) -> uvicorn.Server:
    return InProcessServer(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )


def tree(spans: tuple[ReadableSpan, ...], leaf: ReadableSpan) -> list[str]:
    """The names from the trace's root down to `leaf`."""
    by_id = {s.context.span_id: s for s in spans}
    path = [leaf]
    while path[-1].parent is not None and path[-1].parent.span_id in by_id:
        path.append(by_id[path[-1].parent.span_id])
    return [s.name for s in reversed(path)]


@pytest.mark.devserver
@pytest.mark.timeout(120)
async def test_one_scale_up_is_one_trace(exporter: tuple[InMemorySpanExporter, Any]) -> None:
    memory, interceptor = exporter
    emulator_port = free_port()
    emulator_url = f"http://127.0.0.1:{emulator_port}"
    emulator = emulator_server(API_KEY, emulator_port, seed=5)
    serving = asyncio.create_task(emulator.serve())
    received: list[ExportTraceServiceRequest] = []
    collector_port = free_port()
    otlp = serve(collector(received), collector_port)
    collecting = asyncio.create_task(otlp.serve())
    config = worker_config(API_KEY, emulator_url, PROXY_PASSWORD, metrics_port=0)
    try:
        async with await dev_server() as env:
            address = env.client.service_client.config.target_host
            client = await connect(address=address, env={}, interceptors=[interceptor])
            stop = asyncio.Event()
            worker = asyncio.create_task(run_worker(config, client, shutdown_event=stop))
            try:
                await worker_serves(client, "default", worker)
                pool = parse_pool(pool_manifest(POOL, replicas=1))
                await PoolClient(client).apply(pool)

                def http_of_create() -> ReadableSpan | None:
                    spans = memory.get_finished_spans()
                    creates = {
                        s.context.span_id for s in spans if s.name == "RunActivity:create_device"
                    }
                    for span in spans:
                        if span.parent is not None and span.parent.span_id in creates:
                            return span
                    return None

                async def found() -> ReadableSpan | None:
                    return http_of_create()

                leaf = await eventually(found, timeout=60, what="the create's HTTP span")

                # A provider call with a secret in its query string (as an API that
                # takes its key there would): the span keeps the name, not the value.
                async with httpx.AsyncClient(base_url=emulator_url) as http:
                    await http.get("/api/v1/regions", params={"api_key": API_KEY, "region": "us"})

                # The real CLI, traced by the environment alone, exporting OTLP before it
                # exits (os._exit skips atexit): the worker's handling links to its span.
                env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
                env.update(
                    TEMPORAL_ADDRESS=address,
                    OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{collector_port}",
                    OTEL_SERVICE_NAME="devicepool-cli-test",
                )
                cli = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "devicepool.client", "scale", POOL, "--replicas", "2",
                    env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                )  # fmt: skip
                out, err = await asyncio.wait_for(cli.communicate(), 60)
                assert cli.returncode == 0, (out, err)
            finally:
                stop.set()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(worker, 30)
                with contextlib.suppress(Exception):
                    await client.get_workflow_handle(f"devicepool/{POOL}").terminate()
    finally:
        emulator.should_exit = True
        otlp.should_exit = True
        await serving
        await collecting

    spans = memory.get_finished_spans()
    # apply → pool workflow → batch → create activity → httpx call, all one trace.
    path = tree(spans, leaf)
    assert path == [
        "StartUpdateWithStartWorkflow:DevicePool",
        "StartChildWorkflow:ProvisionBatch",
        "StartActivity:create_device",
        "RunActivity:create_device",
        "POST",
    ], path
    root = next(s for s in spans if s.name == path[0])
    assert root.parent is None
    assert dict(root.attributes or {})["temporalWorkflowID"] == f"devicepool/{POOL}"
    trace = [s for s in spans if s.context.trace_id == root.context.trace_id]
    # The workflows' own spans hang where the SDK puts them: each run under the
    # call that started it, beside what the run then calls.
    batch_start = next(s for s in trace if s.name == path[1])
    for name, parent in (
        ("RunWorkflow:DevicePool", root),
        ("RunWorkflow:ProvisionBatch", batch_start),
    ):
        runs = [s for s in trace if s.name == name]
        assert runs, f"no {name} span in the trace: {sorted({s.name for s in trace})}"
        assert all(r.parent and r.parent.span_id == parent.context.span_id for r in runs)
    attributes = dict(leaf.attributes or {})
    assert str(attributes["http.url"]).endswith("/api/v1/android/devices")
    assert attributes["http.status_code"] == 202
    assert attributes["http.request.header.authorization"] == tracing.REDACTED

    regions = next(s for s in spans if "region=us" in str(url_of(s)))
    assert str(url_of(regions)).endswith("/api/v1/regions?api_key=REDACTED&region=us")

    exported = [
        (resource.resource, span)
        for request in received
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]
    updates = [(r, s) for r, s in exported if s.name == "StartWorkflowUpdate:scale_update"]
    assert len(updates) == 1, [s.name for _, s in exported]
    resource, update = updates[0]
    names = {a.key: a.value.string_value for a in resource.attributes}
    assert names["service.name"] == "devicepool-cli-test"
    handled = [s for s in spans if s.name == "HandleUpdate:scale_update"]
    assert handled, sorted({s.name for s in spans})
    # The SDK hangs a handler under the pool's own trace and links it to the caller.
    linked = {
        (link.context.trace_id.to_bytes(16, "big"), link.context.span_id.to_bytes(8, "big"))
        for s in handled
        for link in s.links
    }
    assert (update.trace_id, update.span_id) in linked, linked

    # No span of the whole run carries a secret, whatever the attribute.
    for span in spans:
        for value in (span.attributes or {}).values():
            assert API_KEY not in str(value), (span.name, value)
            assert PROXY_PASSWORD not in str(value), (span.name, value)


def url_of(span: ReadableSpan) -> Any:
    return (span.attributes or {}).get("http.url")


def test_scrub_url_keeps_names_and_drops_secrets() -> None:
    scrub = tracing.scrub_url
    assert scrub("https://u:pw@api.test/v1/devices?label=pool%3Dx&page_size=100") == (
        "https://api.test/v1/devices?label=pool=x&page_size=100"
    )
    assert scrub("https://api.test/x?token=t1&apiKey=k1&X-Signature=s&region=eu&password=p") == (
        "https://api.test/x?token=REDACTED&apiKey=REDACTED&X-Signature=REDACTED&region=eu"
        "&password=REDACTED"
    )


def test_tracing_is_off_unless_the_environment_asks() -> None:
    asks = tracing.tracing_requested
    assert not asks({})
    assert not asks({"OTEL_SERVICE_NAME": "devicepool"})
    assert not asks({"OTEL_TRACES_EXPORTER": "none"})
    assert not asks({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"})
    assert asks({"OTEL_TRACES_EXPORTER": "otlp"})
    assert asks({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert asks({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})
    assert tracing.interceptors_from_env({}) == []
    with pytest.raises(tracing.TracingUnavailable, match=r"OTEL_TRACES_EXPORTER=zipkin: .*otlp"):
        tracing.interceptors_from_env({"OTEL_TRACES_EXPORTER": "zipkin"})


def test_a_process_without_tracing_loads_no_opentelemetry() -> None:
    """`make demo`'s install has no OpenTelemetry: nothing on the default path may import it."""
    code = (
        "import sys, asyncio\n"
        "import devicepool.client.cli, devicepool.worker.main\n"
        "from devicepool.connect import connect\n"
        "from devicepool.errors import TemporalUnreachable\n"
        "try:\n"
        "    asyncio.run(connect(address='127.0.0.1:9', env={}))\n"
        "except TemporalUnreachable:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry', 'cryptography'))))\n"
        # As the CLI ends: the SDK's native threads can abort a finalizing interpreter.
        "sys.stdout.flush()\n"
        "import os; os._exit(0)\n"
    )
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert shown.stdout.strip() == "[]", shown.stdout


def test_tracing_asked_without_the_extra_is_one_line(tmp_path: Any) -> None:
    """A missing package (simulated: an import hook refusing OpenTelemetry's SDK) is exit 2 with
    what to install, before anything connects."""
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\n"
        "class _Refuse:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.startswith('opentelemetry.sdk'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, _Refuse())\n"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(tmp_path),
        "OTEL_TRACES_EXPORTER": "otlp",
        "TEMPORAL_ADDRESS": "127.0.0.1:9",
    }
    done = subprocess.run(
        [sys.executable, "-m", "devicepool.client", "get"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == 2, done
    assert done.stderr == (
        "error: tracing is asked for by the OTEL_* environment, but opentelemetry-sdk is not "
        "installed: pip install 'devicepool[tracing]' (or unset OTEL_TRACES_EXPORTER / "
        "OTEL_EXPORTER_OTLP_ENDPOINT)\n"
    )
