"""The installed distribution: one top-level name, a deliberate public surface, no stray imports."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

import devicepool
import devicepool.client

ROOT = Path(__file__).resolve().parents[2]
LAYERS = sorted(p.name for p in (ROOT / "devicepool").iterdir() if p.is_symlink())


def test_every_layer_folder_is_a_subpackage_of_devicepool() -> None:
    assert LAYERS == ["activities", "api", "client", "emulator", "worker", "workflows"]
    for layer in LAYERS:
        assert (ROOT / "devicepool" / layer).resolve() == ROOT / layer


def test_no_module_imports_a_layer_by_its_bare_folder_name() -> None:
    """`import api` works in the editable checkout (its root is on sys.path) but not installed."""
    offenders = []
    folders = [*LAYERS, "devicepool", "tests", "bench"]
    for folder in folders:
        for path in (ROOT / folder).rglob("*.py"):
            if ".venv" in path.parts or (folder == "devicepool" and path.parent.is_symlink()):
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                offenders += [
                    f"{path.relative_to(ROOT)}:{node.lineno} {name}"
                    for name in names
                    if name.split(".")[0] in LAYERS
                ]
    assert offenders == []


def test_the_client_exports_exactly_its_public_names() -> None:
    assert sorted(devicepool.client.__all__) == [
        "BadInput",
        "DeleteResult",
        "DevicePoolError",
        "PoolBlocked",
        "PoolClient",
        "PoolNotFound",
        "PoolSummary",
        "TemporalUnreachable",
        "WaitTimeout",
        "connect",
    ]
    for name in devicepool.client.__all__:
        assert getattr(devicepool.client, name) is not None
    assert issubclass(devicepool.client.PoolNotFound, devicepool.client.DevicePoolError)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # The build backend's PEP 517 hook, which `pip wheel --no-build-isolation` calls in a
    # process of its own (without pip's own start-up: ~0.5 CPU-s). setuptools comes from
    # the dev venv, nothing is downloaded.
    build = "import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])"
    subprocess.run(
        [sys.executable, "-c", build, str(out)],
        cwd=ROOT, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    (built,) = out.glob("devicepool-*.whl")
    return built


@pytest.mark.e2e  # builds and installs the wheel (pip processes)
def test_the_wheel_installs_only_devicepool_at_top_level(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert top == {"devicepool", f"devicepool-{devicepool.__version__}.dist-info"}
    for layer in LAYERS:
        assert f"devicepool/{layer}/__init__.py" in names
    assert "devicepool/workflows/pool/workflow.py" in names


@pytest.mark.e2e  # builds and installs the wheel (pip processes)
def test_an_installed_wheel_imports_beside_a_users_own_api_and_client(
    wheel: Path, tmp_path: Path
) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    # The wheel itself, unpacked as pip would; its dependencies from the dev venv
    # (a plain path: the dev venv's own .pth files, the editable checkout among
    # them, are not processed from there).
    zipfile.ZipFile(wheel).extractall(site)
    deps = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    Path(site, "zz_devicepool_deps.pth").write_text(deps + "\n")

    project = tmp_path / "users-project"
    for package, body in {
        "api": "",
        "api/errors": "class Unrelated: ...\n",
        "client": "",
        "worker": "",
    }.items():
        path = project / (package + ".py" if "/" in package else package + "/__init__.py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    script = textwrap.dedent(
        """
        import api.errors, client
        from devicepool.client import PoolClient, PoolNotFound
        import devicepool
        print(devicepool.__file__)
        print(api.errors.__file__)
        print(PoolClient.__module__, PoolNotFound.__mro__[1].__name__)
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    result = subprocess.run(
        [python, "-c", script], cwd=project, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    installed, users_api, module = result.stdout.split("\n")[:3]
    assert installed.startswith(site)
    assert users_api.startswith(str(project))
    assert module == "devicepool.client.pool_client DevicePoolError"
