"""`devicepool connect` and the `connect` of `devicepool lease -o json`, against pure pools
(tests/client/test_leases_client.py's fakes) and the REST emulator in process: without a history
key the CLI points at `devicepool connect` and reads the provider itself with the worker
config's account (the pool is never asked); with one it asks the pool (`lease_connect`)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from devicepool.activities.bitcloudphone import BitCloudPhoneClient
from devicepool.activities.connect_models import AdbLogin, ConnectInfo
from devicepool.activities.providers import registry
from devicepool.api import parse_pool
from devicepool.client import PoolClient
from devicepool.client.errors import EXIT_OK, EXIT_REFUSED, EXIT_RUNTIME, LeaseRefused
from devicepool.codec import EncryptionCodec, KeyRing
from devicepool.emulator.app import create_app
from devicepool.testing import pool_manifest
from devicepool.workflows.reconciler.connecting import CONNECT_FAILED, ConnectAnswer
from tests.client.test_leases_client import LeasePool, Temporal, refused
from tests.helpers.cli import cli, fake_temporal
from tests.helpers.emulator import BASE_URL, DEV_KEY, config

SPEC = parse_pool(pool_manifest("p", replicas=1)).spec.to_json_dict()
LOGIN = AdbLogin(ip="10.1.2.3", port=5555, code="pool-said-c0de")


class ConnectPool(LeasePool):
    """A DevicePool whose spec names its account, and which answers `lease_connect`."""

    async def query(self, name: str, arg: Any = None, **_: Any) -> Any:
        if name == "spec":
            self.asked.append(name)
            return {"spec": {**SPEC, "leases": self.rules.to_json_dict()}}
        return await super().query(name, arg)

    failing = False

    def lease_connect(self, request: Any) -> ConnectAnswer:
        if self.failing:
            raise refused("connect info of d-1: invalid_state: device d-1 is busy", CONNECT_FAILED)
        held = self.book.lease(request.lease)
        assert held is not None
        return ConnectAnswer(lease=held.id, device=held.device, connect=ConnectInfo(adb=LOGIN))


@pytest.fixture
def temporal(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(*pools: LeasePool, key: bool = False) -> Temporal:
        fake = Temporal(*pools)
        if key:
            ring = KeyRing.from_files([key_file(Path(os.environ["KEY_DIR"]))])
            fake.data_converter = SimpleNamespace(payload_codec=EncryptionCodec(ring))  # type: ignore[attr-defined]
        return fake_temporal(monkeypatch, fake)

    return install


@pytest.fixture(autouse=True)
def _keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEY_DIR", str(tmp_path))
    monkeypatch.delenv("DEVICEPOOL_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)  # no `devicepool dev` config found by accident


def key_file(directory: Path) -> Path:
    path = directory / "k.key"
    if not path.exists():
        path.write_text(base64.b64encode(os.urandom(32)).decode())
    return path


class Ready:
    """A ready device at an in-process REST emulator, for the CLI's own event loops."""

    def __init__(self) -> None:
        self.transport = httpx.ASGITransport(app=create_app(config()))
        self.device = asyncio.run(self._made())

    def client(self) -> BitCloudPhoneClient:
        return BitCloudPhoneClient(base_url=BASE_URL, api_key=DEV_KEY, transport=self.transport)

    async def _made(self) -> str:
        async with self.client() as bcp:
            made = await bcp.create_device(
                "android", region="us-west", os_version="14", name="d", labels={"pool": "p"},
                proxy=None, idempotency_key="k-1",
            )  # fmt: skip
        async with httpx.AsyncClient(transport=self.transport, base_url=BASE_URL) as http:
            (await http.post("/_emulator/clock", json={"advanceSeconds": 60})).raise_for_status()
        return str(made["id"])

    def code(self) -> str:
        async def read() -> str:
            async with self.client() as bcp:
                return str((await bcp.get_device(self.device))["connect"]["adb"]["code"])

        return asyncio.run(read())


@pytest.fixture
def ready(monkeypatch: pytest.MonkeyPatch) -> Ready:
    """The device, and the adapter the CLI builds sent to its emulator."""
    made = Ready()
    built = registry.build_provider

    def in_process(account: Any, **kwargs: Any) -> Any:
        return built(account, **{**kwargs, "transport": made.transport})

    monkeypatch.setattr(registry, "build_provider", in_process)
    return made


def worker_config(directory: Path) -> Path:
    (directory / "default.key").write_text(DEV_KEY)
    path = directory / "worker.yaml"
    account = {"baseUrl": BASE_URL, "apiKeyFile": "default.key"}
    path.write_text(json.dumps({"accounts": {"default": account}}))
    return path


def test_without_a_history_key_the_cli_reads_the_provider_itself(
    capsys: pytest.CaptureFixture[str], temporal: Any, ready: Ready, tmp_path: Path
) -> None:
    device = ready.device
    pool = ConnectPool("p", [device])
    temporal(pool)
    code, out, err = cli(capsys, "lease", "p", "-o", "json")
    assert code == EXIT_OK, err
    lease = json.loads(out)["lease"]
    assert json.loads(out)["connect"] == {"ref": f"devicepool connect p {lease}"}
    config = worker_config(tmp_path)
    code, out, err = cli(capsys, "connect", "p", lease, "--config", str(config), "-o", "json")
    assert code == EXIT_OK, err
    shown = json.loads(out)
    assert (shown["lease"], shown["pool"], shown["device"]) == (lease, "p", device)
    assert shown["connect"]["adb"]["code"] == ready.code()
    assert "lease_connect" not in pool.asked  # nothing of it through Temporal
    # The table, for a person: the adb command and its password.
    code, out, err = cli(capsys, "connect", "p", lease, "--config", str(config), "-o", "table")
    assert code == EXIT_OK, err
    assert "adb connect " in out and shown["connect"]["adb"]["code"] in out
    # `devicepool dev`'s config is found without --config.
    (tmp_path / ".devicepool").mkdir()
    config.rename(tmp_path / ".devicepool" / "worker.yaml")
    (tmp_path / "default.key").rename(tmp_path / ".devicepool" / "default.key")
    assert cli(capsys, "connect", "p", lease, "-o", "json")[0] == EXIT_OK
    # Released: not held, exit 3 with one line.
    assert cli(capsys, "release", "p", lease)[0] == EXIT_OK
    code, out, err = cli(capsys, "connect", "p", lease)
    assert (code, out) == (EXIT_REFUSED, "")
    assert err == f'error: pool "p": lease {lease} is not held (`devicepool leases p`)\n'


def test_with_a_history_key_the_pool_answers(
    capsys: pytest.CaptureFixture[str], temporal: Any
) -> None:
    pool = ConnectPool("p", ["d-1", "d-2"])
    temporal(pool, key=True)
    code, out, err = cli(capsys, "lease", "p", "-o", "json")
    assert code == EXIT_OK, err
    shown = json.loads(out)
    assert shown["connect"] == {"adb": LOGIN.model_dump(mode="json")}
    code, out, err = cli(capsys, "connect", "p", shown["lease"], "-o", "json")
    assert code == EXIT_OK, err
    assert json.loads(out)["connect"]["adb"]["code"] == LOGIN.code
    # The provider failed: the lease stands (exit 0, and why), `connect` exits 1.
    pool.failing = True
    code, out, err = cli(capsys, "lease", "p", "-o", "json")
    assert code == EXIT_OK, err
    again = json.loads(out)
    assert again["connect"]["ref"] == f"devicepool connect p {again['lease']}"
    assert "device d-1 is busy" in again["connect"]["message"]
    code, out, err = cli(capsys, "connect", "p", again["lease"], "-o", "json")
    assert (code, out) == (EXIT_RUNTIME, "")
    assert err == 'error: pool "p": connect info of d-1: invalid_state: device d-1 is busy\n'


async def test_the_python_api_asks_the_pool_for_its_lease(temporal: Any) -> None:
    pools = PoolClient(temporal(ConnectPool("p", ["d-1"]), key=True))
    lease = await pools.acquire_lease("p")
    assert (await lease.connect()).adb == LOGIN
    assert (await pools.lease_connect("p", lease.id)).adb == LOGIN


async def test_the_python_api_without_a_key_is_refused_before_asking(temporal: Any) -> None:
    pool = ConnectPool("p", ["d-1"])
    pools = PoolClient(temporal(pool))  # type: ignore[arg-type]
    lease = await pools.acquire_lease("p")
    with pytest.raises(LeaseRefused, match=r"devicepool connect p \S+ --config WORKER_CONFIG"):
        await lease.connect()
    assert "lease_connect" not in pool.asked


def test_a_browser_pools_profile_needs_encrypted_history(
    capsys: pytest.CaptureFixture[str], temporal: Any
) -> None:
    temporal(LeasePool("b", ["p-1"], kind="browserpool"))
    code, out, err = cli(capsys, "lease", "browserpool/b", "-o", "json")
    assert code == EXIT_OK, err
    lease = json.loads(out)["lease"]
    code, out, err = cli(capsys, "connect", "browserpool/b", lease)
    assert (code, out) == (EXIT_RUNTIME, "")
    assert "read by its node worker" in err and err.count("\n") == 1
