"""`devicepool dev --encrypt`: a missing `cryptography` stops it before anything starts, and the
banner's `Try:` line exports the key the CLI needs (its path, never the key).

Without processes: the stack's spawns and waits are stubbed; the real encrypted stack is
tests/encryption/test_enc_web_ui.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from devicepool.client._dev_config import DevOptions, dev_key_file, ensure_dev_key
from devicepool.client._dev_stack import DevStack
from devicepool.client.cli import main
from devicepool.codec import ENV_KEY_FILES
from devicepool.testing import free_port
from tests.helpers.dev_stubs import stub_dev_stack

AESGCM_MODULE = "cryptography.hazmat.primitives.ciphers.aead"


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """`DevStack.start` with nothing spawned or waited for; the children it would start."""
    names: list[str] = []

    async def spawn(stack: DevStack, name: str, *_: object, **__: object) -> None:
        names.append(name)

    stub_dev_stack(monkeypatch, spawn, skip=("_wait_http",))
    return names


@pytest.fixture
def no_cryptography(monkeypatch: pytest.MonkeyPatch) -> None:
    # `import` of a module whose sys.modules entry is None raises ImportError.
    monkeypatch.setitem(sys.modules, AESGCM_MODULE, None)


def dev(data: Path, *flags: str) -> list[str]:
    ports = ["--port", "--ui-port", "--emulator-port", "--metrics-port", "--codec-port"]
    return [
        "dev",
        "--data-dir",
        str(data),
        *[a for p in ports for a in (p, str(free_port()))],
        *flags,
    ]


@pytest.mark.parametrize(
    ("earlier", "flags", "said"),
    [
        pytest.param(
            False,
            ("--encrypt",),
            "error: --encrypt needs the `cryptography` package",
            id="encrypt",
        ),
        # The data dir of an earlier `--encrypt` run holds its key: it needs it too.
        pytest.param(
            True, (), "{data} holds encrypted history (an earlier --encrypt)", id="encrypted-dir"
        ),
    ],
)
def test_without_cryptography_an_encrypted_dev_stops_before_anything_starts(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    spawned: list[str],
    no_cryptography: None,
    earlier: bool,
    flags: tuple[str, ...],
    said: str,
) -> None:
    data = tmp_path / "data"
    if earlier:
        ensure_dev_key(DevOptions(data_dir=data))
    code = main(dev(data, *flags))
    out, err = capsys.readouterr()
    assert code != 0
    assert out == "" and err.count("\n") == 1, err
    assert said.format(data=data) in err
    assert "pip install 'devicepool[encryption]'" in err
    assert spawned == []
    # No key made: a data dir did not become an encrypted one.
    assert dev_key_file(DevOptions(data_dir=data)).exists() == earlier


async def banner(options: DevOptions) -> str:
    lines: list[str] = []
    stack = DevStack(options, out=lines.append)
    await stack.start([])
    await stack.stop()
    return next(line for line in lines if line.startswith("devicepool dev is up\n"))


async def test_the_try_line_exports_the_key_file_never_the_key(
    tmp_path: Path, spawned: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    options = DevOptions(data_dir=Path("data"), encrypt=True)  # relative, as the default is
    said = await banner(options)
    key_file = (tmp_path / "data" / "secrets" / "encryption" / "dev.key").resolve()
    (try_line,) = [line for line in said.splitlines() if line.startswith("Try:")]
    assert try_line.startswith(f"Try:  export {ENV_KEY_FILES}={key_file} && ")
    assert f"  For the CLI:      export {ENV_KEY_FILES}={key_file}\n" in said
    assert try_line.endswith(" get")
    assert key_file.read_text().strip() not in said
    assert "codec-server" in spawned
    # Without encryption the line is as it was.
    plain = await banner(DevOptions(data_dir=tmp_path / "plain"))
    assert ENV_KEY_FILES not in plain
