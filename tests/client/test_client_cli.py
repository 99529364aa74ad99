"""The `devicepool` CLI: every command's exit code and one-line errors, no server needed.

Temporal is pointed at a closed port, so a command that contacts it exits 1
with the "cannot reach" line; a command that exits 2 instead proves it
rejected its input locally, before contacting anything.
"""

from __future__ import annotations

import json
import os
import socket
import textwrap
from pathlib import Path

import pytest

import devicepool.client._dev_stack
from devicepool.client.cli import main
from devicepool.client.dev import DevOptions, DevStack
from devicepool.client.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_RUNTIME, DevicePoolError
from devicepool.emulator.cli import build_parser as emulator_parser
from devicepool.testing import free_port as closed_port  # nothing listens on it
from devicepool.workflows.pool.messages import Accepted
from tests.helpers.cli import DEVICE_POOL_COLUMNS

GOOD = """\
apiVersion: mobile.example.com/v1alpha1
kind: DevicePool
metadata:
  name: cli-pool
spec:
  platform: android
  region: us-west
  replicas: 2
"""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(err: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert "Traceback" not in err


def manifest(tmp_path: Path, text: str, name: str = "pool.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


# ---------------------------------------------------------------- exit 0


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "version")
    assert code == EXIT_OK
    assert out.startswith("devicepool ")


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == EXIT_OK
    rows = out.split("Commands:", 1)[1].splitlines()
    listed = {row.split()[0] for row in rows if row.startswith("  ") and row.split()}
    for command in (
        "apply",
        "get",
        "describe",
        "scale",
        "delete",
        "devices",
        "worker",
        "emulator",
        "dev",
        "setup",
        "version",
    ):
        # The command's own row, not a substring: "dev" is in "devicepool" and "devices".
        assert command in listed, (command, out)


def test_dash_dash_version_is_the_version_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert code == EXIT_OK
    assert out == run(capsys, "version")[1]
    assert out.startswith("devicepool ")


def test_help_shows_whole_descriptions_and_the_temporal_environment(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == EXIT_OK
    # Without care click cuts a description longer than ~45 characters ("...").
    from devicepool.client.cli import app

    flat = " ".join(out.split())
    for command in app.registered_commands:
        first_line = (command.callback.__doc__ or "").strip().splitlines()[0]
        assert " ".join(first_line.split()) in flat, command.name
    assert "TEMPORAL_ADDRESS" in out and "127.0.0.1:7233" in out
    assert "TEMPORAL_NAMESPACE" in out and "TEMPORAL_PROFILE" in out


@pytest.mark.parametrize(
    "command",
    [
        [],
        *([c] for c in "apply get describe devices scale delete worker dev setup version".split()),
    ],
    ids=lambda argv: " ".join(argv) or "devicepool",
)
def test_h_is_help_wherever_help_is(capsys: pytest.CaptureFixture[str], command: list[str]) -> None:
    code, out, err = run(capsys, *command, "-h")
    assert code == EXIT_OK, err
    assert out.lower().startswith("usage:"), out
    assert run(capsys, *command, "--help")[1] == out


def test_dev_help_has_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "dev", "--help")
    assert code == EXIT_OK
    for flag in (
        "--port",
        "--ui-port",
        "--emulator-port",
        "--metrics-port",
        "--data-dir",
        "--provision-seconds",
        "--terminate-seconds",
        "--creates-per-minute",
        "--resync-seconds",
        "--health-seconds",
        "--offline-after-seconds",
        "--startup-timeout-seconds",
        "--apply",
    ):
        assert flag in out


# ---------------------------------------------------------------- exit 1: unreachable server


@pytest.mark.parametrize(
    "argv",
    [
        ["get"],
        ["get", "cli-pool", "-o", "json"],
        ["describe", "cli-pool"],
        ["devices", "cli-pool"],
        ["scale", "cli-pool", "--replicas", "3"],
        ["delete", "cli-pool", "--wait"],
        ["setup"],
    ],
)
def test_unreachable_server_is_exit_1_with_one_line(
    capsys: pytest.CaptureFixture[str], unreachable: str, argv: list[str]
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == EXIT_RUNTIME
    assert_one_line_error(err)
    assert f"cannot reach Temporal at {unreachable} — is `devicepool dev` running?" in err
    assert out == ""


def test_apply_good_manifest_unreachable_is_exit_1(
    capsys: pytest.CaptureFixture[str], unreachable: str, tmp_path: Path
) -> None:
    code, _, err = run(capsys, "apply", "-f", str(manifest(tmp_path, GOOD)))
    assert code == EXIT_RUNTIME
    assert f"cannot reach Temporal at {unreachable}" in err


def test_apply_the_examples_directory_gets_past_its_manifests(
    capsys: pytest.CaptureFixture[str], unreachable: str
) -> None:
    # The worker config used to sit among the manifests: exit 2, "apiVersion: required".
    examples = Path(__file__).resolve().parents[2] / "examples"
    code, _, err = run(capsys, "apply", "-f", str(examples))
    assert code == EXIT_RUNTIME, err
    assert f"cannot reach Temporal at {unreachable}" in err


def test_default_address_is_loopback_7233(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from devicepool.connect import connect_config

    assert connect_config(env={})["target_host"] == "127.0.0.1:7233"
    assert connect_config(env={"TEMPORAL_ADDRESS": "temporal.example:7233"})["target_host"] == (
        "temporal.example:7233"
    )


# ---------------------------------------------------------------- exit 2: bad input, nothing contacted


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GOOD.replace("replicas: 2", "replicas: 501"), "spec.replicas: must be <= 500, got 501"),
        (GOOD.replace("replicas: 2", "replica: 2"), "spec.replica: unknown field"),
        (GOOD.replace("android", "symbian"), "spec.platform"),
        (GOOD.replace("name: cli-pool", "name: Bad_Name"), "metadata.name"),
        ("kind: [unclosed\n", "pool.yaml"),
        # One problem: a Deployment's two (apiVersion, kind) print a line each (issue 28).
        ("apiVersion: apps/v1\nkind: DevicePool\n", "apiVersion"),
    ],
)
def test_bad_manifest_is_exit_2_before_contacting_temporal(
    capsys: pytest.CaptureFixture[str],
    unreachable: str,
    tmp_path: Path,
    text: str,
    expected: str,
) -> None:
    code, out, err = run(capsys, "apply", "-f", str(manifest(tmp_path, text)))
    assert code == EXIT_BAD_INPUT, err
    assert_one_line_error(err)
    assert expected in err
    assert "cannot reach" not in err
    assert out == ""


@pytest.mark.parametrize(
    "text",
    ["[" * 200_000 + "]" * 200_000, "- " * 5000 + "x\n"],
    ids=["json-200000-deep", "yaml-5000-deep"],
)
def test_deeply_nested_manifest_is_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], unreachable: str, tmp_path: Path, text: str
) -> None:
    # It was a RecursionError traceback.
    path = tmp_path / "pool.yaml"
    path.write_text(text)
    code, out, err = run(capsys, "apply", "-f", str(path))
    assert code == EXIT_BAD_INPUT, err[-300:]
    assert_one_line_error(err)
    assert err.endswith("nesting deeper than 100 levels\n"), err[-300:]
    assert len(err) < 300
    assert out == ""


def test_missing_manifest_file_is_exit_2(
    capsys: pytest.CaptureFixture[str], unreachable: str, tmp_path: Path
) -> None:
    code, _, err = run(capsys, "apply", "-f", str(tmp_path / "nope.yaml"))
    assert code == EXIT_BAD_INPUT
    assert "no such file" in err


def test_directory_with_one_bad_manifest_applies_nothing(
    capsys: pytest.CaptureFixture[str], unreachable: str, tmp_path: Path
) -> None:
    manifest(tmp_path, GOOD, "a.yaml")
    manifest(tmp_path, GOOD.replace("cli-pool", "other").replace("2", "900"), "b.yaml")
    code, _, err = run(capsys, "apply", "-f", str(tmp_path))
    assert code == EXIT_BAD_INPUT
    assert "b.yaml" in err


@pytest.mark.parametrize("replicas", ["501", "-1"])
def test_scale_out_of_range_is_exit_2(
    capsys: pytest.CaptureFixture[str], unreachable: str, replicas: str
) -> None:
    code, _, err = run(capsys, "scale", "cli-pool", "--replicas", replicas)
    assert code == EXIT_BAD_INPUT
    assert_one_line_error(err)
    assert "replicas" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["scale", "Not_A_Name", "--replicas", "3"],
        ["get", "Not_A_Name"],
        ["describe", "bad.name"],
        ["delete", "UPPER"],
        ["devices", "x" * 64],
    ],
)
def test_bad_pool_name_is_exit_2(
    capsys: pytest.CaptureFixture[str], unreachable: str, argv: list[str]
) -> None:
    code, _, err = run(capsys, *argv)
    assert code == EXIT_BAD_INPUT
    assert_one_line_error(err)
    assert "invalid pool name" in err


def test_a_long_pool_name_is_shortened_in_its_error(
    capsys: pytest.CaptureFixture[str], unreachable: str
) -> None:
    code, _, err = run(capsys, "describe", "x" * 5000)
    assert code == EXIT_BAD_INPUT
    assert_one_line_error(err)
    assert len(err) < 200, err[:300]
    assert f"invalid pool name '{'x' * 59}…' (5000 characters)" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["scale", "cli-pool", "--replicas", "many"],
        ["scale", "cli-pool"],
        ["get", "-o", "xml"],
        ["apply"],
        ["frobnicate"],
        ["get", "--bogus"],
    ],
)
def test_bad_flags_are_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], unreachable: str, argv: list[str]
) -> None:
    code, _, err = run(capsys, *argv)
    assert code == EXIT_BAD_INPUT
    assert_one_line_error(err)


def test_a_bad_choice_is_said_plainly(capsys: pytest.CaptureFixture[str]) -> None:
    # Typer checks choices with pydantic; its "Value error," prefix is not for users.
    code, _, err = run(capsys, "get", "-o", "wide")
    assert code == EXIT_BAD_INPUT
    assert_one_line_error(err)
    assert "Value error" not in err
    assert "'wide' is not one of 'table', 'json', 'yaml'" in err


def test_dev_with_bad_apply_manifest_starts_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = manifest(tmp_path, GOOD.replace("replicas: 2", "replicas: 501"))
    data = tmp_path / "data"
    code, _, err = run(capsys, "dev", "--data-dir", str(data), "--apply", str(bad))
    assert code == EXIT_BAD_INPUT
    assert "spec.replicas" in err
    assert not data.exists()


def test_dev_refuses_a_busy_port(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, _, err = run(
            capsys, "dev", "--data-dir", str(tmp_path / "d"), "--emulator-port", str(port)
        )
    assert code == EXIT_RUNTIME
    assert_one_line_error(err)
    assert f"port {port} (--emulator-port) is already in use" in err


def test_dev_gives_the_emulator_a_state_file_in_its_data_dir(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real `devicepool dev` start-up, up to the point where it waits for its children.
    spawned: dict[str, list[str]] = {}

    async def record(stack: DevStack, name: str, args: list[str], env: object = None) -> None:
        spawned[name] = args

    async def stop_here(stack: DevStack) -> None:
        raise DevicePoolError("stopped by the test before anything started")

    monkeypatch.setattr(DevStack, "_spawn", record)
    monkeypatch.setattr(DevStack, "_wait_temporal", stop_here)
    monkeypatch.setattr(DevStack, "_wait_emulator", stop_here)
    data = tmp_path / "data"
    ports = [str(closed_port()) for _ in range(4)]
    flags = ("--port", "--ui-port", "--emulator-port", "--metrics-port")
    argv = [arg for flag, port in zip(flags, ports, strict=True) for arg in (flag, port)]
    code, _, err = run(capsys, "dev", "--data-dir", str(data), *argv)
    assert code == EXIT_RUNTIME, err
    assert "stopped by the test" in err

    command = spawned["emulator"]
    assert command[1:3] == ["-m", "devicepool.emulator"]
    emulator_args = emulator_parser().parse_args(command[3:])
    assert emulator_args.state == data / "emulator.sqlite"
    assert emulator_args.port == int(ports[2])


# ---------------------------------------------------------------- worker config errors: exit 2


def test_worker_missing_config_file_is_exit_2(
    capsys: pytest.CaptureFixture[str], unreachable: str, tmp_path: Path
) -> None:
    code, _, err = run(capsys, "worker", "--config", str(tmp_path / "none.yaml"))
    assert code == EXIT_BAD_INPUT
    assert_one_line_error(err)
    assert "config file not found" in err


def test_worker_config_error_names_the_field(
    capsys: pytest.CaptureFixture[str], unreachable: str, tmp_path: Path
) -> None:
    config = tmp_path / "devicepool.yaml"
    config.write_text(
        "accounts:\n  default:\n    baseUrl: http://127.0.0.1:8088\n    apiKeyFile: missing.key\n"
    )
    code, _, err = run(capsys, "worker", "--config", str(config))
    assert code == EXIT_BAD_INPUT
    assert_one_line_error(err)
    assert "accounts.default.apiKeyFile" in err


def test_worker_good_config_unreachable_is_exit_1(
    capsys: pytest.CaptureFixture[str], unreachable: str, tmp_path: Path
) -> None:
    (tmp_path / "k").write_text("secret-key-123\n")
    config = tmp_path / "devicepool.yaml"
    config.write_text(
        "accounts:\n  default:\n    baseUrl: http://127.0.0.1:8088\n    apiKeyFile: k\n"
        "metricsPort: 0\n"
    )
    code, _, err = run(capsys, "worker", "--config", str(config))
    assert code == EXIT_RUNTIME
    assert f"cannot reach Temporal at {unreachable}" in err.strip().splitlines()[-1]
    assert "secret-key-123" not in err


# ---------------------------------------------------------------- emulator delegates


@pytest.mark.parametrize("help_flag", ["--help", "-h"])
def test_emulator_delegates_its_flags(capsys: pytest.CaptureFixture[str], help_flag: str) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["emulator", help_flag])
    assert exc.value.code == 0
    out, _ = capsys.readouterr()
    assert "--provision-seconds" in out
    assert "--creates-per-minute" in out


def test_emulator_bad_flag_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["emulator", "--port", "not-a-port"])
    assert exc.value.code == 2


# ---------------------------------------------------------------- rendering


def test_json_is_the_default_off_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from devicepool.client import PoolSummary, _cli_pools

    class FakePools:
        async def list_kinds(self, kinds: list[str], **_: object) -> list[PoolSummary]:
            if "DevicePool" not in kinds:
                return []
            return [
                PoolSummary(
                    name="p1",
                    spec={"platform": "ios", "region": "eu", "replicas": 3},
                    status={"phase": "Ready", "desiredReplicas": 3, "readyDevices": 3},
                )
            ]

    async def fake_pools(name: str | None = None) -> FakePools:
        return FakePools()

    monkeypatch.setattr(_cli_pools, "open_pools", fake_pools)
    code, out, _ = run(capsys, "get")
    assert code == EXIT_OK
    [item] = json.loads(out)
    assert item["metadata"]["name"] == "p1"
    assert item["status"]["readyDevices"] == 3

    code, out, _ = run(capsys, "get", "-o", "table")
    header, row = out.strip().splitlines()
    assert header.split() == DEVICE_POOL_COLUMNS
    assert row.split()[:5] == ["p1", "ios", "eu", "3", "3"]

    code, out, _ = run(capsys, "get", "-o", "yaml")
    assert "name: p1" in out


@pytest.mark.parametrize(
    ("replicas", "message"),
    [
        ("501", "error: replicas: must be between 0 and 500, got 501"),
        ("-1", "error: replicas: must be between 0 and 500, got -1"),
    ],
)
def test_scale_out_of_range_message(
    capsys: pytest.CaptureFixture[str], unreachable: str, replicas: str, message: str
) -> None:
    code, _, err = run(capsys, "scale", "cli-pool", "--replicas", replicas)
    assert code == EXIT_BAD_INPUT
    assert err.strip() == message


def test_devices_table_reads_the_camel_case_query_answer(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from devicepool.client import _cli_pools
    from devicepool.workflows.pool.messages import DevicesView

    class FakePools:
        async def devices(self, name: str) -> DevicesView:
            return DevicesView.model_validate(
                {
                    "devices": [
                        {
                            "id": "d-1",
                            "status": "busy",
                            "region": "us-west",
                            "createdAt": "2025-01-01T00:00:00Z",
                            "sessionActive": True,
                            "lastActivityAt": "2025-01-02T00:00:00Z",
                        }
                    ]
                }
            )

    async def fake_pools(name: str | None = None) -> FakePools:
        return FakePools()

    monkeypatch.setattr(_cli_pools, "open_pools", fake_pools)
    code, out, _ = run(capsys, "devices", "cli-pool", "-o", "json")
    assert code == EXIT_OK
    [item] = json.loads(out)
    assert {"createdAt", "sessionActive", "lastActivityAt"} <= item.keys()

    code, out, _ = run(capsys, "devices", "cli-pool", "-o", "table")
    assert code == EXIT_OK
    header, row = out.strip().splitlines()
    assert header.split()[:5] == ["ID", "STATUS", "REGION", "AGE", "SESSION"]
    cells = row.split()
    assert cells[:3] == ["d-1", "busy", "us-west"]
    assert cells[3].endswith("d")  # an age from createdAt, not "-"
    assert cells[4] == "yes"  # sessionActive
    assert cells[5].endswith("d")  # an age from lastActivityAt


# ---------------------------------------------------------------- apply and delete answers


class FakeHandle:
    """A pool workflow as `PoolClient` sees it: running, answering `status` from a script."""

    def __init__(self, statuses: list[dict[str, object]]) -> None:
        self.statuses = statuses
        self.cancelled = False

    async def describe(self) -> object:
        from types import SimpleNamespace

        from temporalio.client import WorkflowExecutionStatus

        return SimpleNamespace(status=WorkflowExecutionStatus.RUNNING)

    async def query(self, name: str, **_: object) -> dict[str, object]:
        # While creates are pending, `--wait` also reads the pool's account and its window.
        if name == "spec":
            return {"spec": {"provider": {"account": "default"}}}
        if name == "ledger":
            return {"capacity": 20, "windowSeconds": 60.0, "waiting": {}}
        assert name == "status"
        # The last answer repeats: the pool stays as it is.
        return self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]

    async def cancel(self) -> None:
        self.cancelled = True

    async def execute_update(self, name: str, request: object, **_: object) -> object:
        from devicepool.api.names import UPDATE_SCALE

        assert name == UPDATE_SCALE
        return Accepted(generation=2, replicas=request.replicas, result="configured")  # type: ignore[attr-defined]


class MissingHandle(FakeHandle):
    """No pool by that name: the workflow ran once and is closed."""

    async def describe(self) -> object:
        from types import SimpleNamespace

        from temporalio.client import WorkflowExecutionStatus

        return SimpleNamespace(status=WorkflowExecutionStatus.COMPLETED)


class FakeTemporal:
    """Just enough of a Temporal client for `PoolClient.apply`, `wait_ready` and `delete`."""

    def __init__(
        self,
        statuses: list[dict[str, object]],
        answers: list[object] = (),
        *,
        new: bool = False,
        running: bool = False,
    ) -> None:
        from types import SimpleNamespace

        self.service_client = SimpleNamespace(config=SimpleNamespace(target_host="fake:7233"))
        # no payload codec: a client with keys, so apply asks nothing about encryption
        self.data_converter = SimpleNamespace(payload_codec=None)
        self.pool = FakeHandle(statuses)
        self.answers = list(answers)
        # `new`: no pool by that name runs, so `apply`'s plain start succeeds.
        self.new = new
        # `running`: the pool runs already whatever the answers (another apply started it).
        self.running = running
        self.started: list[str] = []
        self.updates = 0

    async def start_workflow(self, workflow: str, arg: object, *, id: str, **_: object) -> object:
        """A new pool (`new`, or the next answer says `created`) starts; else it runs already."""
        from temporalio.exceptions import WorkflowAlreadyStartedError

        creating = bool(self.answers) and getattr(self.answers[0], "result", None) == "created"
        if self.running or not (self.new or creating):
            raise WorkflowAlreadyStartedError(id, workflow)
        if creating:
            self.answers.pop(0)
        self.new = False
        self.started.append(id)
        return self.pool

    def get_workflow_handle(self, workflow_id: str, **_: object) -> FakeHandle:
        # No BrowserPool of the pool's name (a bare NAME is the DevicePool's alone).
        if workflow_id.startswith("browserpool/"):
            return MissingHandle([])
        # The account's ledger (`apply`'s account check) runs as well as the pool.
        return self.pool

    async def execute_update_with_start_workflow(self, *_: object, **__: object) -> object:
        self.updates += 1
        return self.answers.pop(0)


def fake_temporal(monkeypatch: pytest.MonkeyPatch, temporal: FakeTemporal) -> None:
    from devicepool.client import PoolClient, _cli_pools

    async def fake_pools(name: str | None = None) -> PoolClient:
        return PoolClient(temporal)  # type: ignore[arg-type]

    monkeypatch.setattr(_cli_pools, "open_pools", fake_pools)


def ready_false(reason: str, message: str, generation: int = 1) -> dict[str, object]:
    return {
        "phase": "Degraded",
        "desiredReplicas": 2,
        "readyDevices": 0,
        "observedGeneration": generation,
        "conditions": [{"type": "Ready", "status": "False", "reason": reason, "message": message}],
    }


def test_apply_says_created_configured_or_unchanged_as_kubectl_does(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = manifest(tmp_path, GOOD)
    answers = [
        Accepted(generation=1, replicas=2, result="created"),
        Accepted(generation=1, replicas=2, result="unchanged"),
        Accepted(generation=2, replicas=2, result="configured"),
        Accepted(generation=2, replicas=2, result="unchanged"),
        # From a worker that predates `result`: generation 1 is the best guess.
        Accepted(generation=1, replicas=2),
        Accepted(generation=3, replicas=2),
    ]
    fake_temporal(monkeypatch, FakeTemporal([{}], answers))
    lines = []
    for _ in answers:
        code, out, err = run(capsys, "apply", "-f", str(path))
        assert code == EXIT_OK, err
        lines.append(out.strip())
    assert lines == [
        "devicepool/cli-pool created (generation 1, replicas 2)",
        "devicepool/cli-pool unchanged (generation 1, replicas 2)",
        "devicepool/cli-pool configured (generation 2, replicas 2)",
        "devicepool/cli-pool unchanged (generation 2, replicas 2)",
        "devicepool/cli-pool created (generation 1, replicas 2)",
        "devicepool/cli-pool configured (generation 3, replicas 2)",
    ]


def test_apply_of_a_new_pool_is_one_start_and_of_a_running_one_an_update(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = manifest(tmp_path, GOOD)
    temporal = FakeTemporal(
        [{}], [Accepted(generation=1, replicas=2, result="unchanged")], new=True
    )
    fake_temporal(monkeypatch, temporal)
    code, out, err = run(capsys, "apply", "-f", str(path))
    assert code == EXIT_OK, err
    assert out.strip() == "devicepool/cli-pool created (generation 1, replicas 2)"
    assert (temporal.started, temporal.updates) == (["devicepool/cli-pool"], 0)
    code, out, err = run(capsys, "apply", "-f", str(path))  # it runs now: the update answers
    assert out.strip() == "devicepool/cli-pool unchanged (generation 1, replicas 2)"
    assert (temporal.started, temporal.updates) == (["devicepool/cli-pool"], 1)


def test_a_pool_another_apply_started_is_not_reported_created_twice(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Two applies race: the other's start won, and this update was the first the
    # pool handled (it answers `created`); this apply created nothing.
    path = manifest(tmp_path, GOOD)
    answers = [
        Accepted(generation=1, replicas=2, result="created"),
        Accepted(generation=2, replicas=2, result="created"),
    ]
    fake_temporal(monkeypatch, FakeTemporal([{}], answers, running=True))
    _, same, _ = run(capsys, "apply", "-f", str(path))
    _, changed, _ = run(capsys, "apply", "-f", str(path))
    assert same.strip() == "devicepool/cli-pool unchanged (generation 1, replicas 2)"
    assert changed.strip() == "devicepool/cli-pool configured (generation 2, replicas 2)"


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        (
            "UnknownProxyPool",
            "unknown proxy pool 'nope' (proxy.poolRef); known: proxyseller-us"
            " — provisioning stopped",
        ),
        (
            "UnknownAccount",
            "unknown account 'gone' (providerCredentialRef); known: default — provisioning stopped",
        ),
        (
            "ProxyIncomplete",
            "proxy pool 'gw' has no password (passwordFile or passwordEnv) in the worker config:"
            " a cloud phone's proxy needs a host, port, username and password"
            " — provisioning stopped",
        ),
        (
            "UnsupportedPlatform",
            "platform ios: the BitBrowser Local API has Android cloud phones only"
            " (providerCredentialRef 'phones') — provisioning stopped",
        ),
        (
            "UnknownRegion",
            "unknown region 'mars-1' (spec.region); known: us-west — provisioning stopped",
        ),
    ],
)
def test_apply_wait_stops_at_once_on_a_configuration_error(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    reason: str,
    message: str,
) -> None:
    statuses = [
        {"observedGeneration": 0, "desiredReplicas": 2},  # not looked at yet
        ready_false(reason, message),
    ]
    accepted = Accepted(generation=1, replicas=2, result="created")
    fake_temporal(monkeypatch, FakeTemporal(statuses, [accepted]))
    code, out, err = run(
        capsys, "apply", "-f", str(manifest(tmp_path, GOOD)), "--wait", "--timeout", "5"
    )
    assert code == EXIT_RUNTIME
    assert out.strip() == "devicepool/cli-pool created (generation 1, replicas 2)"
    assert_one_line_error(err)
    # A pool this apply created (generation 1): the line says how to remove it too.
    assert err.strip() == (
        f'error: pool "cli-pool" cannot become ready: {reason}: {message}; fix the manifest or '
        "the worker config and apply again, or remove the pool: devicepool delete cli-pool"
    )


def test_apply_wait_ignores_a_configuration_error_of_an_older_generation(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The change being waited for may be the fix: only a pass over it counts.
    converged = {
        "observedGeneration": 2,
        "desiredReplicas": 2,
        "readyDevices": 2,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Converged"}],
    }
    statuses = [ready_false("UnknownProxyPool", "unknown proxy pool 'nope'", generation=1)]
    statuses.append(converged)
    accepted = Accepted(generation=2, replicas=2, result="configured")
    fake_temporal(monkeypatch, FakeTemporal(statuses, [accepted]))
    code, out, err = run(capsys, "apply", "-f", str(manifest(tmp_path, GOOD)), "--wait")
    assert code == EXIT_OK, err
    assert out.strip().splitlines()[-1] == "devicepool/cli-pool ready"


def test_delete_wait_stops_at_once_on_a_blocked_teardown(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    running = {"phase": "Ready", "deviceIds": ["d-1", "d-2"]}
    blocked = {
        "phase": "Deleting",
        "deviceIds": ["d-1", "d-2"],
        "conditions": [
            {
                "type": "TeardownBlocked",
                "status": "True",
                "reason": "Unauthenticated",
                "message": "cannot delete devices: 401 unauthenticated: invalid API key",
            }
        ],
    }
    temporal = FakeTemporal([running, blocked])
    fake_temporal(monkeypatch, temporal)
    code, out, err = run(capsys, "delete", "cli-pool", "--wait", "--timeout", "5")
    assert temporal.pool.cancelled
    assert code == EXIT_RUNTIME
    assert out == ""
    assert_one_line_error(err)
    assert err.strip() == (
        'error: pool "cli-pool" cannot finish deleting: Unauthenticated: cannot delete devices: '
        "401 unauthenticated: invalid API key; it keeps retrying until the cause is fixed "
        "(devicepool describe cli-pool)"
    )


class DeletedHandle(FakeHandle):
    """A pool that ends once deleted: CANCELED, its closed run answering `status` (when
    `answers`); or COMPLETED (a teardown that continued-as-new), its result the status."""

    def __init__(self, statuses: list[dict[str, object]], end: str, answers: bool) -> None:
        super().__init__(statuses)
        self.end, self.answers = end, answers

    async def describe(self) -> object:
        from types import SimpleNamespace

        from temporalio.client import WorkflowExecutionStatus

        status = WorkflowExecutionStatus[self.end] if self.cancelled else None
        return SimpleNamespace(status=status or WorkflowExecutionStatus.RUNNING)

    async def query(self, name: str, **kwargs: object) -> dict[str, object]:
        from temporalio.service import RPCError, RPCStatusCode

        if self.cancelled and not self.answers:
            raise RPCError("unavailable", RPCStatusCode.UNAVAILABLE, b"")
        return await super().query(name, **kwargs)

    async def result(self, **_: object) -> dict[str, object]:
        assert self.end == "COMPLETED"
        return self.statuses[-1]


@pytest.mark.parametrize(
    ("retired", "end", "answers"),
    [(0, "CANCELED", True), (4, "CANCELED", True), (4, "COMPLETED", False), (4, "CANCELED", False)],
)
def test_delete_wait_says_what_a_provider_without_delete_kept(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    retired: int,
    end: str,
    answers: bool,
) -> None:
    temporal = FakeTemporal([{"phase": "Deleted", "profilesRetired": retired}])
    temporal.pool = DeletedHandle(temporal.pool.statuses, end, answers)
    fake_temporal(monkeypatch, temporal)
    code, out, err = run(capsys, "delete", "cli-pool", "--wait", "--timeout", "5")
    assert code == EXIT_OK, err
    lines = out.strip().splitlines()
    assert lines[0] == "devicepool/cli-pool deleted (0 devices left)"
    if not retired or (end, answers) == ("CANCELED", False):
        # None kept, or the closed pool could not be asked (the delete still succeeded).
        assert lines == lines[:1]
        return
    assert lines[1:] == [
        "4 cloud-phone profile(s) kept, powered off and marked retired: "
        "the BitBrowser Local API has no delete"
    ]


def test_scale_wait_waits_until_ready_equals_desired(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    statuses: list[dict[str, object]] = [
        {"observedGeneration": 1, "desiredReplicas": 2, "readyDevices": 2},  # before the scale
        {"observedGeneration": 2, "desiredReplicas": 3, "readyDevices": 2, "pendingDevices": 1},
        {"observedGeneration": 2, "desiredReplicas": 3, "readyDevices": 3},
    ]
    temporal = FakeTemporal(statuses)
    fake_temporal(monkeypatch, temporal)
    monkeypatch.setattr("devicepool.client._waits.POLL_SECONDS", 0.01)
    code, out, err = run(capsys, "scale", "cli-pool", "--replicas", "3", "--wait")
    assert code == EXIT_OK, err
    assert out.splitlines() == [
        "devicepool/cli-pool scaled to 3 (generation 2)",
        "devicepool/cli-pool ready",
    ]
    assert len(temporal.pool.statuses) == 1  # it read until the last status


def test_scale_wait_gives_up_at_its_timeout(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pending = {"observedGeneration": 2, "desiredReplicas": 3, "readyDevices": 2}
    fake_temporal(monkeypatch, FakeTemporal([pending]))
    monkeypatch.setattr("devicepool.client._waits.POLL_SECONDS", 0.01)
    code, out, err = run(
        capsys, "scale", "cli-pool", "--replicas", "3", "--wait", "--timeout", "0.1"
    )
    assert code == EXIT_RUNTIME
    assert out.strip() == "devicepool/cli-pool scaled to 3 (generation 2)"
    assert_one_line_error(err)
    assert "not ready after 0.1s (2/3 ready" in err


def test_a_timeout_is_seconds_or_a_duration_as_kubectl_takes_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pending = {"observedGeneration": 2, "desiredReplicas": 3, "readyDevices": 2}
    fake_temporal(monkeypatch, FakeTemporal([pending]))
    monkeypatch.setattr("devicepool.client._waits.POLL_SECONDS", 0.01)
    code, _, err = run(
        capsys, "scale", "cli-pool", "--replicas", "3", "--wait", "--timeout", "100ms"
    )
    assert code == EXIT_RUNTIME and "not ready after 0.1s" in err
    for bad, said in (
        ("soon", "must be seconds (120) or a duration"),
        ("-5", "must be 0s to"),
        ("nan", "0s to"),
    ):
        code, out, err = run(capsys, "scale", "cli-pool", "--replicas", "3", "--timeout", bad)
        assert (code, out) == (EXIT_BAD_INPUT, ""), bad
        assert "--timeout" in err and said in err, err


def test_delete_wait_of_a_missing_pool_says_so_without_a_progress_bar(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich draws (and keeps) its bars as on a terminal
    temporal = FakeTemporal([{}])
    temporal.pool = MissingHandle([{}])
    fake_temporal(monkeypatch, temporal)
    code, out, err = run(capsys, "delete", "gone", "--wait")
    assert code == EXIT_RUNTIME
    assert out == ""
    assert_one_line_error(err)
    # A bare NAME may mean either kind (issue 43: it named only devicepool/gone).
    assert err.strip() == (
        'error: pool "gone" not found (no running DevicePool or BrowserPool of that name)'
    )
    assert not temporal.pool.cancelled

    for argv in (["--wait"], []):
        code, out, err = run(capsys, "delete", "gone", "--ignore-not-found", *argv)
        assert (code, out, err) == (EXIT_OK, "", "")


def test_describe_prints_text_off_a_terminal_and_json_when_asked(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from devicepool.client import _cli_pools

    described = {
        "metadata": {"name": "p1", "creationTimestamp": "2025-01-01T00:00:00Z"},
        "spec": {"platform": "android", "region": "us-west", "replicas": 2},
        "status": {"phase": "Ready", "desiredReplicas": 2, "readyDevices": 2, "conditions": []},
        "workflow": {"id": "devicepool/p1", "runId": "r", "status": "RUNNING"},
        "devices": [],
        "events": [],
    }

    class FakePools:
        async def describe(self, name: str, *, kind: str = "DevicePool") -> dict[str, object]:
            return described

    async def fake_pools(name: str | None = None) -> FakePools:
        return FakePools()

    monkeypatch.setattr(_cli_pools, "open_pools", fake_pools)
    code, out, _ = run(capsys, "describe", "p1")  # stdout is a pipe here, as in `| less`
    assert code == EXIT_OK
    assert out.startswith("Name:")
    assert "Conditions:" in out and "Events:" in out
    code, out, _ = run(capsys, "describe", "p1", "-o", "json")
    assert json.loads(out) == described
    code, out, _ = run(capsys, "describe", "p1", "-o", "yaml")
    assert out.startswith("metadata:")


# ---------------------------------------------------------------- devicepool dev --apply


@pytest.fixture
def dev_stack_without_processes(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """`DevStack.start` with nothing spawned or waited for; records what it applied."""
    applied: list[list[str]] = []

    async def nothing(*_: object, **__: object) -> None:
        return None

    async def record(stack: DevStack, pools: list[object]) -> None:
        applied.append([pool.name for pool in pools])  # type: ignore[attr-defined]

    for method in ("_spawn", "_wait_temporal", "_wait_emulator", "_start_worker"):
        monkeypatch.setattr(DevStack, method, nothing)
    monkeypatch.setattr(DevStack, "_check_ports", lambda stack: None)
    monkeypatch.setattr(devicepool.client._dev_stack, "find_temporal", lambda: "temporal")
    monkeypatch.setattr(DevStack, "apply", record)
    return applied


async def test_dev_applies_its_manifests_on_a_new_data_dir_only(
    tmp_path: Path, dev_stack_without_processes: list[list[str]]
) -> None:
    from devicepool.api.loader import load_manifests
    from devicepool.client.dev import DevOptions

    path = manifest(tmp_path, GOOD)
    pools = load_manifests(path)
    data = tmp_path / "data"
    options = DevOptions(data_dir=data, apply=str(path))

    lines: list[str] = []
    stack = DevStack(options, out=lines.append)
    await stack.start(pools)
    await stack.stop()
    assert dev_stack_without_processes == [["cli-pool"]]
    banner = next(line for line in lines if line.startswith("devicepool dev is up\n"))
    assert f"  Manifests:        {path} applied (a new data dir)\n" in banner

    # The stack ran: the Temporal database holds the pools, and the user's
    # changes to them since. A restart must not apply the manifests again.
    (data / "temporal.db").write_bytes(b"")
    lines.clear()
    await DevStack(options, out=lines.append).start(pools)
    assert dev_stack_without_processes == [["cli-pool"]]
    banner = next(line for line in lines if line.startswith("devicepool dev is up\n"))
    assert (
        f"  Manifests:        {path} not applied: {data} already existed, so its pools keep "
        f"their changes (apply it by hand to reset them)\n"
    ) in banner


def _fake_venv(root: Path) -> Path:
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "devicepool"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    (bin_dir / "activate").write_text("")
    return bin_dir


async def test_dev_banner_hint_is_a_command_that_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dev_stack_without_processes: list[list[str]]
) -> None:
    # `make demo` runs .venv/bin/devicepool: a bare `devicepool` is not on PATH.
    from devicepool.client.dev import DevOptions

    bin_dir = _fake_venv(tmp_path)
    monkeypatch.setattr("sys.executable", str(bin_dir / "python"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    lines: list[str] = []
    stack = DevStack(DevOptions(data_dir=tmp_path / "data"), out=lines.append)
    await stack.start([])
    await stack.stop()
    banner = next(line for line in lines if line.startswith("devicepool dev is up\n"))
    assert (
        "Try:  .venv/bin/devicepool apply -f examples/quickstart.yaml --wait "
        "&& .venv/bin/devicepool get\n"
    ) in banner
    assert "source .venv/bin/activate" in banner

    # With the venv's bin on PATH (activated), the bare name works.
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    lines.clear()
    await DevStack(DevOptions(data_dir=tmp_path / "data"), out=lines.append).start([])
    banner = next(line for line in lines if line.startswith("devicepool dev is up\n"))
    assert "Try:  devicepool apply -f examples/quickstart.yaml --wait && devicepool get\n" in banner
    assert "activate" not in banner


def _files(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(path.relative_to(root)): (path.read_bytes(), path.stat().st_mtime_ns)
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


@pytest.mark.e2e  # a second `devicepool dev` as a separate process
def test_a_second_dev_on_the_same_data_dir_refuses_and_changes_nothing(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    dev_stack_without_processes: list[list[str]],
) -> None:
    # Following the port-in-use hint with other ports but the same data dir
    # died with SQLITE_BUSY and rewrote the running stack's worker.yaml.
    import asyncio
    import subprocess
    import sys

    from devicepool.client.dev import DevOptions

    data = tmp_path / "data"
    first = DevStack(DevOptions(data_dir=data), out=lambda line: None)
    asyncio.run(first.start([]))
    before = _files(data)
    assert "worker.yaml" in before
    ports = [str(closed_port()) for _ in range(4)]
    flags = ("--port", "--ui-port", "--emulator-port", "--metrics-port")
    argv = ["dev", "--data-dir", str(data)]
    argv += [arg for flag, port in zip(flags, ports, strict=True) for arg in (flag, port)]
    expected = (
        f"error: {data} is in use by another `devicepool dev` (pid {os.getpid()}, "
        "Temporal 127.0.0.1:7233, Web UI port 8233, emulator port 8088, metrics port 9464): "
        "stop it first, or give this one another --data-dir"
    )
    try:
        code, _, err = run(capsys, *argv)
        assert code == EXIT_RUNTIME
        assert_one_line_error(err)
        assert err.strip() == expected
        # The real CLI in a process of its own, as a user would run it.
        other = subprocess.run(
            [sys.executable, "-m", "devicepool.client", *argv],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert other.returncode == EXIT_RUNTIME, other.stderr
        assert other.stderr.strip() == expected
        assert _files(data) == before
    finally:
        asyncio.run(first.stop())

    # Once the first stack has stopped, the data dir is free again.
    again = DevStack(DevOptions(data_dir=data), out=lambda line: None)
    asyncio.run(again.start([]))
    asyncio.run(again.stop())


# ---------------------------------------------------------------- devicepool dev: Ctrl-C

METRICS = """\
# TYPE temporal_worker_task_slots_used gauge
temporal_worker_task_slots_used{task_queue="devicepool",worker_type="ActivityWorker"} 2.0
temporal_worker_task_slots_used{task_queue="devicepool",worker_type="WorkflowWorker"} 1.0
temporal_worker_task_slots_used{task_queue="devicepool",worker_type="LocalActivityWorker"} 0.0
temporal_worker_task_slots_used{task_queue="devicepool-watch",worker_type="ActivityWorker"} 40.0
temporal_worker_task_slots_used{task_queue="devicepool-account-default",worker_type="ActivityWorker"} 1.0
"""


def test_in_flight_activities_leave_the_watches_out() -> None:
    from devicepool.client._dev_commands import in_flight_activities

    # Watches are cut off at once at shutdown: only the others are waited for.
    assert in_flight_activities(METRICS) == 3
    assert in_flight_activities("") == 0


async def test_ctrl_c_says_what_the_stack_is_waiting_for(tmp_path: Path) -> None:
    import asyncio
    import sys

    from devicepool.client._dev_processes import spawn
    from devicepool.client.dev import DevOptions

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = METRICS.encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    metrics_port = server.sockets[0].getsockname()[1]
    lines: list[str] = []
    stack = DevStack(DevOptions(data_dir=tmp_path, metrics_port=metrics_port), out=lines.append)
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    for name in ("temporal", "emulator", "worker"):
        stack.children.append(await spawn(name, sleeper, log_path=tmp_path / f"{name}.log"))
    async with server:
        await stack.stop()
    assert lines == [
        "stopping the worker (waiting for 3 activities in flight, at most 20 s) ...",
        "stopping the emulator ...",
        "stopping Temporal ...",
    ]


async def test_dev_banner_links_the_pools_alone_in_the_web_ui(
    tmp_path: Path, dev_stack_without_processes: list[list[str]]
) -> None:
    # The UI's default list mixes pools with their batches, health checks and ledgers.
    from urllib.parse import parse_qs, urlsplit

    from devicepool.client.dev import DevOptions

    lines: list[str] = []
    stack = DevStack(DevOptions(data_dir=tmp_path / "data", ui_port=8299), out=lines.append)
    await stack.start([])
    await stack.stop()
    banner = next(line for line in lines if line.startswith("devicepool dev is up\n"))
    [link] = [line.split()[-1] for line in banner.splitlines() if "Pools only:" in line]
    url = urlsplit(link)
    assert (url.scheme, url.netloc, url.path) == (
        "http",
        "127.0.0.1:8299",
        "/namespaces/default/workflows",
    )
    # Opened once, the UI also keeps the list as the view *Pools* (on this stack's own port,
    # which the docs' 8233 link is not for another --ui-port).
    assert parse_qs(url.query) == {"query": ['WorkflowType="DevicePool"'], "savedQuery": ["Pools"]}
    assert " " not in link and '"' not in link


def test_dev_hands_the_emulator_its_termination_time() -> None:
    def flag(command: list[str], name: str) -> str:
        return command[command.index(name) + 1]

    emulator_command = devicepool.client._dev_stack.emulator_command
    default = emulator_command(DevOptions(), ["default"])
    assert flag(default, "--terminate-seconds") == "5"
    fast = emulator_command(DevOptions(terminate_seconds=0.5, provision_seconds=2), ["default"])
    assert (flag(fast, "--terminate-seconds"), flag(fast, "--provision-seconds")) == ("0.5", "2")
