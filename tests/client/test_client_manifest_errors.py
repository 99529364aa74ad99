"""`devicepool apply -f DIR/` with bad manifests: one problem a line, exit 2, nothing applied
(issue 28: the problems of a directory were one ~900-character line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from devicepool.client.cli import main
from devicepool.client.errors import EXIT_BAD_INPUT
from tests.helpers.manifests import alpha_yaml


def test_a_directory_of_bad_manifests_prints_one_problem_a_line(
    capsys: pytest.CaptureFixture[str], unreachable: str, tmp_path: Path
) -> None:
    (tmp_path / "a.yaml").write_text(alpha_yaml("a"))
    for name in ("b", "c", "d", "e", "f", "g"):
        bad = alpha_yaml(name, replicas=900, region="")
        (tmp_path / f"{name}.yaml").write_text(bad)
    code = main(["apply", "-f", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == EXIT_BAD_INPUT, err
    assert out == ""  # nothing applied
    assert "cannot reach" not in err and "Traceback" not in err
    lines = err.splitlines()
    assert lines[0] == "error: 12 problems:"
    problems = lines[1:]
    assert len(problems) == 12
    for name, region, replicas in zip("bcdefg", problems[::2], problems[1::2], strict=True):
        assert region == f"  {tmp_path / f'{name}.yaml'}: spec.region: must not be empty"
        assert replicas == f"  {tmp_path / f'{name}.yaml'}: spec.replicas: must be <= 500, got 900"
    assert max(len(line) for line in lines) < 200


@pytest.mark.parametrize(("count", "bad"), [(5, "p003"), (20, "p017")])
def test_an_unknown_account_anywhere_applies_nothing_and_names_the_file_and_the_pool(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    count: int,
    bad: str,
) -> None:
    # Issue 28: "unknown account 'gone'" named neither the pool nor its file.
    from tests.client.test_client_apply_many import SlowTemporal, manifests, use

    temporal = SlowTemporal()
    use(monkeypatch, temporal)
    manifests(tmp_path, count, **{bad: "gone"})
    code = main(["apply", "-f", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == EXIT_BAD_INPUT
    assert out == "" and temporal.started == []
    assert err == (
        f"error: {tmp_path / f'{bad}.yaml'}: pool '{bad}': unknown account 'gone' "
        "(spec.provider.account; v1alpha1: spec.providerCredentialRef): no worker serves it; "
        "known accounts: default\n"
    )


def test_the_document_of_a_many_document_file_is_named(tmp_path: Path) -> None:
    from devicepool.api import load_manifests

    path = tmp_path / "pools.yaml"
    path.write_text("---\n".join(alpha_yaml(n, replicas=1) for n in ("a", "b")))
    assert [p.source for p in load_manifests(path)] == [f"{path}[0]", f"{path}[1]"]
