"""`devicepool dev --geelark`: the GeeLark emulator comes up with the stack, the worker's
account `geelark` signs its calls there, a pool of 3 phones converges, heals a phone the
provider stopped on its own, leases a phone (its ADB login; kept, replaced or reset at
release; its lease lost when GeeLark stops it), bills per running minute as the emulator
does, and deletes to 0 phones billed; Ctrl-C stops the emulator with the rest and its team
stays in the data dir.

One stack for the module (a stack's start and stop cost about 8 CPU-s on two shared cores),
with the e2e knobs (tests/helpers/dev_stack.py): a phone boots in 2 s (`--provision-seconds`
is the GeeLark emulator's `--boot-seconds` too), an offline device is replaced after 10 s. The
tests share it and run in file order; the last one stops it with SIGINT. Ground truth is the
emulator's `GET /_emulator/stats` (docs/geelark-emulator.md).
"""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from devicepool.emulator.geelark.config import DEFAULT_API_KEY, DEFAULT_APP_ID
from devicepool.errors import DevicePoolError
from devicepool.testing import free_port, wait_until
from tests.helpers.dev_stack import Stack, alive, cmdline, descendants, start_stack, stop_stack

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(150)]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "geelark" / "geelark.yaml"
POOL = "geelark"
# Plain HTTP: an httpx client that loads the CA bundle costs ~17 ms of CPU a call.
PLAIN: dict[str, Any] = {"timeout": 10, "verify": False}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("dev-geelark")
    stack = start_stack(
        tmp / "dev", tmp / "dev.out", "--geelark", "--geelark-port", str(free_port())
    )
    try:
        yield stack
    finally:
        stop_stack(stack)


def geelark_url(stack: Stack) -> str:
    banner = stack.out.read_text().split("devicepool dev is up\n", 1)[1]
    [line] = [line for line in banner.splitlines() if line.startswith("  GeeLark emulator: ")]
    return line.split()[2]


def phones(stack: Stack) -> dict[str, Any]:
    """The emulator's ground truth on phones (`/_emulator/stats`)."""
    stats = httpx.get(f"{geelark_url(stack)}/_emulator/stats", **PLAIN).json()
    return dict(stats["phones"])


def status(stack: Stack) -> dict[str, Any]:
    try:
        return stack.status(POOL)
    except DevicePoolError:  # not started yet, or gone
        return {}


def test_the_banner_names_the_emulator_and_the_worker_signs_with_a_key_file(stack: Stack) -> None:
    url = geelark_url(stack)
    out = stack.out.read_text()
    assert f"{url}/_emulator/stats" in out
    config = yaml.safe_load((stack.data_dir / "worker.yaml").read_text())
    assert config["accounts"]["geelark"] == {
        "api": "geelark",
        "baseUrl": url,
        "appId": DEFAULT_APP_ID,
        "apiKeyFile": "secrets/geelark.key",
        "createsPerMinute": 120,
        "billing": {"perMinute": 0.007, "dailyCap": 1.0},
    }
    key_file = stack.data_dir / "secrets" / "geelark.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    # The key is in its file only: not said, not on a command line, not in a log.
    logs = [stack.out, *sorted((stack.data_dir / "logs").glob("*.log"))]
    for path in [*logs, stack.data_dir / "worker.yaml"]:
        assert DEFAULT_API_KEY not in path.read_text(errors="replace"), path


def test_a_pool_of_three_converges_to_three_phones_running(stack: Stack) -> None:
    """examples/geelark/geelark.yaml: each phone added (shut down), then started."""
    stack.apply(str(EXAMPLE))
    wait_until(
        lambda: status(stack).get("readyDevices") == 3,
        timeout=60,
        every=1,
        what="3 phones ready",
    )
    made = phones(stack)
    assert (made["running"], made["total"], made["created"]) == (3, 3, 3), made
    assert made["duplicateNames"] == 0, made


@pytest.mark.timeout(240)
def test_a_phone_the_provider_stopped_is_replaced(stack: Stack) -> None:
    """GeeLark may stop a phone on its own (the emulator's control plane: `POST
    /_emulator/phones/{id}/stop`). `phone/status` 2 is `offline` to the pool (docs/providers.md),
    and an offline device is replaced past `offlineAfterSeconds` (10 s here): the stopped
    phone deleted, a new one added and started, 3 running again."""
    before = status(stack)
    [victim, *_] = before["deviceIds"]
    phone_id = victim.split(".", 1)[0]  # a device id is <phone id>.<slot digest>
    answer = httpx.post(f"{geelark_url(stack)}/_emulator/phones/{phone_id}/stop", **PLAIN)
    assert answer.status_code == 200, answer.text
    wait_until(
        lambda: status(stack).get("offlineDevices") == 1,
        timeout=30,
        every=1,
        what="the pool to see the phone offline",
    )

    def healed() -> dict[str, Any] | None:
        now = status(stack)
        ids = now.get("deviceIds") or []
        return now if now.get("readyDevices") == 3 and victim not in ids else None

    wait_until(healed, timeout=90, every=1, what="the stopped phone replaced")
    after = phones(stack)
    assert after["providerStops"] == 1, after
    assert (after["running"], after["total"], after["created"]) == (3, 3, 4), after
    assert after["deleted"] == 1 and after["duplicateNames"] == 0, after
    described = stack.cli_here("describe", POOL)
    assert described.returncode == 0, described.stderr
    # Its event: `Replaced  replaced <id> (offline for 10s (threshold 10s))`.
    assert f"replaced {victim} (offline for" in described.stdout, described.stdout


def lease(stack: Stack, *args: str) -> dict[str, Any]:
    """`devicepool lease geelark ARGS -o json`: the lease as it prints it."""
    leased = stack.cli_here("lease", POOL, "--for", "10m", *args, "-o", "json")
    assert leased.returncode == 0, leased.stderr
    answer: dict[str, Any] = json.loads(leased.stdout)
    return answer


def replaced(stack: Stack, device: str, before: dict[str, Any]) -> dict[str, Any] | None:
    """The pool's status once `device` is gone from it, one more phone is deleted at GeeLark
    and one more made than in `before` (`phones` read before the removal was asked), and 3
    phones run, none still starting. A doomed device leaves `deviceIds` at once, while
    `readyDevices` and the emulator still count it: without the counters a wait ends before
    anything happened, and the next test meets the removal and its replacement on the way."""
    now = status(stack)
    ids = now.get("deviceIds") or []
    if now.get("readyDevices") != 3 or device in ids:
        return None
    made = phones(stack)
    if made["deleted"] <= before["deleted"] or made["created"] <= before["created"]:
        return None
    return now if (made["started"], made["total"]) == (3, 3) else None


def test_a_leased_phone_gives_its_adb_login_and_is_kept_or_replaced_at_release(
    stack: Stack,
) -> None:
    """Issue 41: a GeeLark phone is leased like any device. Without encrypted history the
    lease names `devicepool connect`, which reads the phone's ADB login from `adb/getData`
    (ADB switched on first) with the worker config's account, outside Temporal; a release
    keeps the phone, `--replace` has it deleted and another made."""
    made_before = phones(stack)["created"]
    held = lease(stack)
    assert set(held) == {"lease", "pool", "device", "holder", "expiresAt", "connect"}, held
    assert held["connect"] == {"ref": f"devicepool connect {POOL} {held['lease']}"}
    config = str(stack.data_dir / "worker.yaml")
    read = stack.cli_here("connect", POOL, held["lease"], "--config", config, "-o", "json")
    assert read.returncode == 0, read.stderr
    adb = json.loads(read.stdout)["connect"]["adb"]
    assert adb["ip"] and 1 <= adb["port"] <= 65535 and adb["code"], adb
    # The password is the emulator's live ADB password of that phone, and never in history.
    secrets = httpx.get(f"{geelark_url(stack)}/_emulator/secrets", **PLAIN).json()
    assert adb["code"] in json.dumps(secrets)
    history = stack.temporal("workflow", "show", "--workflow-id", f"devicepool/{POOL}")
    assert history.returncode == 0 and adb["code"] not in history.stdout
    for log in [stack.out, *sorted((stack.data_dir / "logs").glob("*.log"))]:
        assert adb["code"] not in log.read_text(errors="replace"), log

    released = stack.cli_here("release", POOL, held["lease"])
    assert released.returncode == 0, released.stderr
    assert f"{held['device']} released" in released.stdout
    assert held["device"] in status(stack)["deviceIds"]  # kept: leasable again
    again = lease(stack, "--selector", f"device={held['device']}")
    assert again["device"] == held["device"]

    before = phones(stack)
    gone = stack.cli_here("release", POOL, again["lease"], "--replace")
    assert gone.returncode == 0, gone.stderr
    assert "and replaced" in gone.stdout, gone.stdout
    wait_until(
        lambda: replaced(stack, held["device"], before), timeout=60, every=1, what="replaced"
    )
    after = phones(stack)
    assert after["created"] == made_before + 1 and after["duplicateNames"] == 0, after


def test_a_leased_phone_the_provider_stops_ends_its_lease_device_lost(stack: Stack) -> None:
    """GeeLark may shut a phone down on its own (the adapter starts phones without
    `energySavingMode`, but a person or the provider may stop one). A leased phone is no
    exception: shut down reads `offline`, it is replaced past `offlineAfterSeconds` as any
    offline device, and its lease ends `DeviceLost`, which the holder reads at its next
    renew (exit 3), as docs/leases.md says of a leased device that dies."""
    held = lease(stack)
    phone_id = held["device"].split(".", 1)[0]
    before = phones(stack)
    answer = httpx.post(f"{geelark_url(stack)}/_emulator/phones/{phone_id}/stop", **PLAIN)
    assert answer.status_code == 200, answer.text
    wait_until(
        lambda: replaced(stack, held["device"], before), timeout=90, every=1, what="replaced"
    )
    renewed = stack.cli_here("renew", POOL, held["lease"])
    assert renewed.returncode == 3, (renewed.stdout, renewed.stderr)
    assert "DeviceLost" in renewed.stderr, renewed.stderr


def test_on_release_reset_replaces_a_geelark_phone(stack: Stack, tmp_path: Path) -> None:
    """GeeLark documents no reset that clears a phone (`newOne` is a new identity, apps and
    data not said to go): `onRelease: reset` replaces it (event `ResetIsReplace`)."""
    [manifest] = list(yaml.safe_load_all(EXAMPLE.read_text()))
    manifest["spec"]["leases"] = {"onRelease": "reset"}
    path = tmp_path / "geelark-reset.yaml"
    path.write_text(yaml.safe_dump(manifest))
    stack.apply(str(path))  # taken once it returns (the pool's `apply` update)
    before = phones(stack)
    held = lease(stack)
    released = stack.cli_here("release", POOL, held["lease"])
    assert released.returncode == 0, released.stderr
    wait_until(
        lambda: replaced(stack, held["device"], before), timeout=60, every=1, what="replaced"
    )
    # Replaced, not about to be: its phone deleted, another made and started.
    after = phones(stack)
    assert after["deleted"] == before["deleted"] + 1, (before, after)
    assert after["created"] == before["created"] + 1, (before, after)
    assert (after["started"], after["total"]) == (3, 3), after
    described = stack.cli_here("describe", POOL)
    assert "ResetIsReplace" in described.stdout, described.stdout


def test_cost_counts_running_minutes_as_the_emulator_bills_them(stack: Stack) -> None:
    """The dev account bills per running minute to a daily cap (`billing`), as the emulator
    does: `devicepool cost` and the emulator's bill agree within a minute a phone (the
    emulator rounds each phone's day up to whole minutes and bills from the start call; the
    pool counts from the pass that sees it) and the stopped phones bill nothing."""

    def cost() -> dict[str, Any] | None:
        shown = stack.cli_here("cost", POOL, "-o", "json")
        assert shown.returncode == 0, shown.stderr
        [pool] = json.loads(shown.stdout)["pools"]
        # Three phones running (none booting or on its way out): $0.42 an hour each.
        return pool if pool["hourlyCost"] == pytest.approx(3 * 0.42) else None

    pool = wait_until(cost, timeout=30, every=1, what="three phones billing")
    bill = httpx.get(f"{geelark_url(stack)}/_emulator/stats", **PLAIN).json()
    billed_phones = len(bill["billing"]["byPhone"])
    assert pool["cost"] == pytest.approx(bill["moneyBilled"], abs=0.007 * billed_phones + 0.005)


def why_not_deleted(stack: Stack) -> str:
    """What a delete that did not finish was waiting for: the pool's conditions and events,
    the worker's last lines (a batch waited for, a sweep retried), GeeLark's phones."""
    described = stack.cli_here("describe", POOL)
    worker = (stack.data_dir / "logs" / "worker.log").read_text(errors="replace")
    tail = "\n".join(worker.splitlines()[-40:])
    return f"{described.stdout}{described.stderr}\n{tail}\nGeeLark: {phones(stack)}"


def test_delete_leaves_no_phone_billed_and_ctrl_c_stops_the_emulator(stack: Stack) -> None:
    # A settled pool of 3 is deleted in 4-7 s on two cores, with four to six busy loops
    # beside it too: 90 s is no bound on load but on a wait (one teardown's wait for a batch
    # that never reports is 90 s here: the startup timeout, 30 s, and the batch check grace).
    deleted = stack.cli_here("delete", POOL, "--wait", "--timeout", "90")
    assert deleted.returncode == 0, f"{deleted.stdout}{deleted.stderr}\n{why_not_deleted(stack)}"
    assert deleted.stdout.splitlines()[-1] == f"devicepool/{POOL} deleted (0 devices left)"
    left = phones(stack)
    assert (left["running"], left["starting"], left["total"]) == (0, 0, 0), left
    assert left["duplicateNames"] == 0, left

    [emulator] = [
        pid
        for pid in descendants(stack.process.pid)
        if "devicepool.emulator.geelark" in cmdline(pid)
    ]
    stop_stack(stack)
    assert stack.process.returncode == 0, stack.out.read_text()
    wait_until(lambda: not alive(emulator), timeout=10, what="the GeeLark emulator to stop")
    assert "stopping the GeeLark emulator ..." in stack.out.read_text()
    # Its team stays in the data dir for the next run: no phone left, the deleted ones on
    # the bill, the counters.
    team = json.loads((stack.data_dir / "geelark.json").read_text())
    # Every phone ever made is gone: those the pool replaced, and its last three.
    assert team["phones"] == [] and len(team["gone"]) == team["counters"]["created"], team
