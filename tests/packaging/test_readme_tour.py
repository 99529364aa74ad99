"""The README's first tour, read in order as a newcomer types it: no command on a pool the tour
has deleted, no look at a healing before it can have happened, the long apply's time said."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def tour() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme.split("\n## A first tour\n", 1)[1].split("\n## ", 1)[0]


def shell_lines(text: str) -> list[str]:
    blocks = re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_nothing_in_the_tour_addresses_a_pool_after_the_tour_deleted_it() -> None:
    text = tour()
    deletes = list(re.finditer(r"devicepool delete ([a-z0-9-]+)", text))
    assert deletes, "the tour no longer deletes a pool: this test has lost its reason"
    for delete in deletes:
        name = delete[1]
        later = text[delete.end() :]
        # `devicepool/NAME` (a workflow id, for the stock `temporal` CLI or the Web UI) or
        # `devicepool VERB NAME` (the devicepool CLI).
        uses = re.findall(rf"(devicepool/{name}\b|devicepool [a-z-]+ {name}\b)", later)
        assert not uses, f"the tour deletes {name}, then uses it: {uses}"


def test_the_healing_is_watched_or_waited_for_before_describe() -> None:
    lines = shell_lines(tour())
    [offline] = [i for i, line in enumerate(lines) if "/_emulator/devices/$ID/offline" in line]
    describe = next(i for i, line in enumerate(lines) if i > offline and " describe " in line)
    between = lines[offline + 1 : describe]
    assert any("get -w" in line for line in between), lines[offline : describe + 1]
    healing = tour().split("Watch it heal", 1)[1].split("```sh", 1)[0]
    assert "wait about 3 minutes" in " ".join(healing.split())


def test_the_fifty_device_apply_says_how_long_it_takes() -> None:
    text = " ".join(tour().split())
    assert "examples/tiktok-us-pool.yaml --wait" in text
    assert "rents 50 devices and takes about 3 minutes" in text
    assert "replicas: 50 " in " ".join((ROOT / "examples/tiktok-us-pool.yaml").read_text().split())
