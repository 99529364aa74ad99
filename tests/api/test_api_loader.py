"""The manifest loader: the article's manifest applies unchanged, and every bad
input is refused with one line that names the field and the rule."""

from __future__ import annotations

import io
import json
import pickle
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from devicepool.api import (
    DevicePool,
    DevicePoolSpec,
    ManifestError,
    format_validation_error,
    load_manifests,
    load_manifests_text,
    load_resources,
    parse_pool,
)
from devicepool.api.v1alpha1 import MAX_REPLICAS, Platform, Provider
from devicepool.testing import pool_manifest
from tests.helpers.manifest_fuzz import TEXT, field_paths, mutated

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ARTICLE = (EXAMPLES / "tiktok-us-pool.yaml").read_text()


def manifest(name: str = "tiktok-us-pool", **spec: Any) -> dict[str, Any]:
    """The least a manifest says: platform, region and 3 replicas (the loader fills in the rest)."""
    return pool_manifest(name, **{"osVersion": None, "proxy": None, "replicas": 3, **spec})


def problems_of(text: str, *, source: str = "pools.yaml") -> list[str]:
    with pytest.raises(ManifestError) as info:
        load_manifests_text(text, source=source)
    return info.value.problems


def only_problem(text: str, *, source: str = "pools.yaml") -> str:
    problems = problems_of(text, source=source)
    assert len(problems) == 1, problems
    return problems[0]


# --- the article's manifest -------------------------------------------------------


# The article's manifest as the design document publishes it (its first YAML
# block), kept here so the check runs in every checkout: the design lives
# outside the repository, and a test that read it from a machine path skipped
# everywhere else.
ARTICLE_AS_PUBLISHED = """\
apiVersion: mobile.example.com/v1alpha1
kind: DevicePool
metadata:
  name: tiktok-us-pool
spec:
  provider: bitcloudphone      # enum: bitcloudphone
  platform: android            # enum: android | ios
  region: us-west              # min length 1
  osVersion: "14"
  replicas: 50                 # 0..500, capped in the schema itself
  proxy:
    poolRef: proxyseller-us    # a proxy pool named in the worker's config
    stickyTTL: 900             # seconds a device keeps one exit IP
"""


def test_example_matches_the_design_document() -> None:
    assert ARTICLE == ARTICLE_AS_PUBLISHED


def test_article_manifest_loads_unchanged() -> None:
    [pool] = load_manifests(EXAMPLES / "tiktok-us-pool.yaml")
    assert pool.name == "tiktok-us-pool"
    # Read in the article's v1alpha1, kept in the stored v1beta1.
    assert pool.api_version == "mobile.example.com/v1beta1"
    assert pool.spec.provider.name is Provider.BITCLOUDPHONE
    assert pool.spec.platform is Platform.ANDROID
    assert pool.spec.region == "us-west"
    assert pool.spec.os_version == "14"
    assert pool.spec.replicas == 50
    assert pool.spec.proxy is not None
    assert pool.spec.proxy.pool_ref == "proxyseller-us"
    assert pool.spec.proxy.session_ttl == 900
    assert pool.spec.provider.account == "default"


def test_article_manifest_round_trips_in_camel_case() -> None:
    [pool] = load_manifests_text(ARTICLE)
    data = pool.to_json_dict()
    assert data["apiVersion"] == "mobile.example.com/v1beta1"
    assert data["kind"] == "DevicePool"
    assert data["spec"]["osVersion"] == "14"
    assert data["spec"]["proxy"] == {"poolRef": "proxyseller-us", "sessionTTL": "15m"}
    assert data["spec"]["provider"] == {"name": "bitcloudphone", "account": "default"}
    assert "os_version" not in data["spec"]
    assert parse_pool(data) == pool
    assert parse_pool(json.loads(json.dumps(data))) == pool
    # ... and the YAML the CLI would print loads back to the same pool.
    assert load_manifests_text(yaml.safe_dump(data)) == [pool]


def test_quickstart_example() -> None:
    [pool] = load_manifests(EXAMPLES / "quickstart.yaml")
    assert pool.name == "quickstart"
    assert pool.spec.replicas == 5
    assert pool.spec.platform is Platform.ANDROID
    assert pool.spec.region == "us-west"
    assert pool.spec.os_version == "14"
    assert pool.spec.proxy is not None
    assert (pool.spec.proxy.pool_ref, pool.spec.proxy.session_ttl) == ("proxyseller-us", 900)


def test_the_cloud_phones_example_is_on_the_dev_bitbrowser_account() -> None:
    from devicepool.client._dev_config import BITBROWSER_ACCOUNT

    [pool] = load_manifests(EXAMPLES / "cloud-phones" / "cloud-phones.yaml")
    assert (pool.name, pool.spec.platform) == ("cloud-phones", Platform.ANDROID)
    assert pool.spec.provider.account == BITBROWSER_ACCOUNT
    assert pool.spec.proxy is not None and pool.spec.proxy.pool_ref == "proxyseller-us"


def test_the_examples_directory_applies_as_a_whole() -> None:
    # `devicepool apply -f examples/` (the worker config lives in examples/worker/).
    assert sorted(pool.name for pool in load_resources(EXAMPLES)) == [
        "quickstart",
        "quickstart-browsers",
        "tiktok-us-pool",
    ]


def test_unquoted_integer_os_version_is_a_string() -> None:
    [pool] = load_manifests_text(ARTICLE.replace('osVersion: "14"', "osVersion: 14"))
    assert pool.spec.os_version == "14"


# --- one line per mistake ---------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("replicas: 50", "replicas: 501", "spec.replicas: must be <= 500, got 501"),
        ("replicas: 50", "replicas: -1", "spec.replicas: must be >= 0, got -1"),
        (
            "replicas: 50",
            "replica: 50",
            "spec.replica: unknown field (did you mean 'replicas'?)",
        ),
        (
            "platform: android",
            "platform: windows",
            "spec.platform: must be one of android, ios, got 'windows'",
        ),
        (
            "provider: bitcloudphone",
            "provider: aws",
            "spec.provider: must be one of bitcloudphone, got 'aws'",
        ),
        (
            "name: tiktok-us-pool",
            "name: Bad_Name",
            "metadata.name: must be a DNS-1123 label (lowercase letters, digits and '-', "
            "starting and ending with a letter or digit), got 'Bad_Name'",
        ),
        ("region: us-west", 'region: ""', "spec.region: must not be empty"),
        ("replicas: 50", "replicas: ten", "spec.replicas: must be an integer, got 'ten'"),
        ("replicas: 50", "replicas: true", "spec.replicas: must be an integer, got true"),
        ("replicas: 50", "replicas: yes", "spec.replicas: must be an integer, got true"),
        ("replicas: 50", "replicas: 2.5", "spec.replicas: must be an integer, got 2.5"),
        ("replicas: 50", "replicas: null", "spec.replicas: must be an integer, got null"),
        ("replicas: 50", "replicas: [1]", "spec.replicas: must be an integer, got a list"),
        (
            "apiVersion: mobile.example.com/v1alpha1",
            "apiVersion: mobile.example.com/v2",
            "apiVersion: unsupported 'mobile.example.com/v2', supported: "
            "mobile.example.com/v1alpha1, mobile.example.com/v1beta1",
        ),
        ("kind: DevicePool", "kind: Foo", "kind: unsupported 'Foo', supported: DevicePool"),
        ("apiVersion: mobile.example.com/v1alpha1\n", "", "apiVersion: required"),
        ("kind: DevicePool\n", "", "kind: required"),
        ("  platform: android            # enum: android | ios\n", "", "spec.platform: required"),
        (
            "stickyTTL: 900",
            "stickyTtl: 900",
            "spec.proxy.stickyTtl: unknown field (did you mean 'stickyTTL'?)",
        ),
        ("stickyTTL: 900", "stickyTTL: -5", "spec.proxy.stickyTTL: must be >= 0, got -5"),
        (
            "stickyTTL: 900",
            "stickyTTL: false",
            "spec.proxy.stickyTTL: must be an integer, got false",
        ),
        ("poolRef: proxyseller-us", 'poolRef: ""', "spec.proxy.poolRef: must not be empty"),
        (
            "  proxy:\n    poolRef: proxyseller-us    # a proxy pool named in the worker's config\n"
            "    stickyTTL: 900             # seconds a device keeps one exit IP\n",
            "  proxy: proxyseller-us\n",
            "spec.proxy: must be a mapping, got 'proxyseller-us'",
        ),
        (
            'osVersion: "14"',
            "osVersion: 14.10",
            # Issue 28: the digits the user wrote, not YAML's misreading "14.1".
            'spec.osVersion: must be a quoted string: write osVersion: "14.10" '
            "(unquoted, it reads as the number 14.1)",
        ),
        (
            "replicas: 50",
            "replicas: 50\n  flavour: large",
            "spec.flavour: unknown field (known fields: provider, platform, region, osVersion, "
            "replicas, proxy, providerCredentialRef, maxUnhealthy)",
        ),
        (
            "replicas: 50",
            "replicas: 50\n  providerCredentialRef: ''",
            "spec.providerCredentialRef: must not be empty",
        ),
    ],
)
def test_bad_manifest_is_one_clear_line(old: str, new: str, message: str) -> None:
    assert old in ARTICLE
    text = ARTICLE.replace(old, new)
    assert only_problem(text) == f"pools.yaml: {message}"
    with pytest.raises(ManifestError) as info:
        load_manifests_text(text, source="pools.yaml")
    assert str(info.value) == f"pools.yaml: {message}"
    assert "\n" not in str(info.value)


def test_wrong_kind_is_about_the_kind_not_the_spec() -> None:
    text = "apiVersion: apps/v1\nkind: Deployment\nspec:\n  template: {}\n"
    assert problems_of(text) == [
        "pools.yaml: apiVersion: unsupported 'apps/v1', supported: mobile.example.com/v1alpha1, "
        "mobile.example.com/v1beta1",
        "pools.yaml: kind: unsupported 'Deployment', supported: DevicePool",
    ]


def test_all_problems_of_a_document_are_reported() -> None:
    text = ARTICLE.replace("replicas: 50", "replicas: 501").replace("region: us-west", "region: ''")
    problems = problems_of(text)
    assert problems == [
        "pools.yaml: spec.region: must not be empty",
        "pools.yaml: spec.replicas: must be <= 500, got 501",
    ]
    with pytest.raises(ManifestError) as info:
        load_manifests_text(text, source="pools.yaml")
    assert str(info.value) == "\n".join(["2 problems:", *(f"  {p}" for p in problems)])


def test_missing_metadata_and_spec() -> None:
    text = "apiVersion: mobile.example.com/v1alpha1\nkind: DevicePool\n"
    assert problems_of(text) == ["pools.yaml: metadata: required", "pools.yaml: spec: required"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "just a string\n",
            "pools.yaml: must be a mapping with apiVersion, kind, metadata and spec, "
            "got 'just a string'",
        ),
        (
            "42\n",
            "pools.yaml: must be a mapping with apiVersion, kind, metadata and spec, got 42",
        ),
        ("", "pools.yaml: no documents (expected a DevicePool manifest)"),
        ("# only a comment\n", "pools.yaml: no documents (expected a DevicePool manifest)"),
        ("---\n---\n", "pools.yaml: no documents (expected a DevicePool manifest)"),
        ("[]", "pools.yaml: no documents (expected a DevicePool manifest)"),
    ],
)
def test_document_that_is_not_a_manifest(text: str, message: str) -> None:
    assert only_problem(text) == message


def test_yaml_syntax_error_names_line_and_column() -> None:
    text = ARTICLE.replace("  region: us-west", "region: us-west: x")
    assert (
        only_problem(text) == "pools.yaml: line 8, column 16: mapping values are not allowed here"
        " (quote a value that holds ': ')"
    )


def test_yaml_error_in_indentation() -> None:
    lines = ARTICLE.splitlines(keepends=True)
    lines[6] = "  bad: indent\n    what: here\n"  # line 7 becomes a broken nested mapping
    message = only_problem("".join(lines))
    assert message == (
        "pools.yaml: line 8, column 9: mapping values are not allowed here"
        " (check the indentation of line 8)"
    )


@pytest.mark.parametrize(
    ("platform", "region", "line"),
    [
        ("  platform: android", "   region: us-west", 8),  # one space too deep
        ("  platform: android", " region: us-west", 8),  # one space too shallow
        ("    platform: android", "  region: us-west", 7),  # the first one too deep
    ],
)
def test_mis_indented_yaml_gets_an_indentation_hint(platform: str, region: str, line: int) -> None:
    # Issue 28: PyYAML's "expected <block end>" says nothing of the cause.
    lines = ARTICLE.splitlines()
    assert lines[6].startswith("  platform:") and lines[7].startswith("  region:")
    lines[6:8] = [platform, region]
    assert only_problem("\n".join(lines)).endswith(f" (check the indentation of line {line})")


def test_an_unquoted_float_version_is_quoted_with_the_digits_written() -> None:
    # Issue 28: YAML reads 14.10 as 14.1; the suggestion must not repeat the misreading.
    text = ARTICLE.replace('osVersion: "14"', "osVersion: 14.10")
    assert only_problem(text) == (
        'pools.yaml: spec.osVersion: must be a quoted string: write osVersion: "14.10" '
        "(unquoted, it reads as the number 14.1)"
    )
    as_json = json.dumps(yaml.safe_load(ARTICLE)).replace('"osVersion": "14"', '"osVersion": 14.10')
    assert '"14.10"' in only_problem(as_json)


def test_duplicate_key_is_an_error() -> None:
    text = ARTICLE.replace("replicas: 50", "replicas: 50\n  replicas: 5")
    assert only_problem(text) == "pools.yaml: line 11, column 3: duplicate key 'replicas'"


def test_invalid_json_names_line_and_column() -> None:
    text = '{\n  "apiVersion": "mobile.example.com/v1alpha1",\n  "kind" "DevicePool"\n}\n'
    assert only_problem(text, source="pool.json") == (
        "pool.json: line 3, column 10: Expecting ':' delimiter"
    )


def test_no_stack_trace_for_strange_input() -> None:
    for text in ["\t\x00", "!!python/object:os.system {}", "a: !!binary zz\n", "? [a]\n: b\n"]:
        with pytest.raises(ManifestError) as info:
            load_manifests_text(text, source="x.yaml")
        assert str(info.value).startswith("x.yaml: "), str(info.value)
        assert "Traceback" not in str(info.value)


# --- many documents ---------------------------------------------------------------


def test_multiple_documents() -> None:
    second = ARTICLE.replace("tiktok-us-pool", "ig-eu-pool").replace("android", "ios")
    pools = load_manifests_text(f"---\n{ARTICLE}---\n\n---\n{second}---\n")
    assert [p.name for p in pools] == ["tiktok-us-pool", "ig-eu-pool"]
    assert pools[1].spec.platform is Platform.IOS


def test_problems_of_several_documents_name_the_document() -> None:
    second = ARTICLE.replace("tiktok-us-pool", "b").replace("replicas: 50", "replicas: 501")
    third = ARTICLE.replace("tiktok-us-pool", "c").replace("kind: DevicePool", "kind: Foo")
    assert problems_of(f"{ARTICLE}---\n{second}---\n{third}") == [
        "pools.yaml[1]: spec.replicas: must be <= 500, got 501",
        "pools.yaml[2]: kind: unsupported 'Foo', supported: DevicePool",
    ]


def test_duplicate_names_are_refused() -> None:
    assert only_problem(f"{ARTICLE}---\n{ARTICLE}") == (
        "pools.yaml[1]: metadata.name: duplicate pool name 'tiktok-us-pool' "
        "(first defined in pools.yaml[0])"
    )


def test_json_object() -> None:
    text = json.dumps(manifest(replicas=7, proxy={"poolRef": "p", "stickyTTL": 60}), indent="\t")
    [pool] = load_manifests_text(text)
    assert pool.spec.replicas == 7
    assert pool.spec.proxy is not None
    assert pool.spec.proxy.session_ttl == 60


def test_json_list() -> None:
    text = json.dumps([manifest("a"), manifest("b", platform="ios")])
    assert [p.name for p in load_manifests_text(text)] == ["a", "b"]
    bad = json.dumps([manifest("a"), manifest("b", replicas=True)])
    assert only_problem(bad, source="p.json") == (
        "p.json[1]: spec.replicas: must be an integer, got true"
    )


def test_kubernetes_list() -> None:
    text = yaml.safe_dump(
        {"apiVersion": "v1", "kind": "List", "items": [manifest("a"), manifest("b")]}
    )
    assert [p.name for p in load_manifests_text(text)] == ["a", "b"]
    bad = yaml.safe_dump(
        {"apiVersion": "v1", "kind": "List", "items": [manifest("a"), manifest("a", replicas=-3)]}
    )
    assert only_problem(bad) == "pools.yaml: items[1].spec.replicas: must be >= 0, got -3"
    dup = yaml.safe_dump(
        {"apiVersion": "v1", "kind": "List", "items": [manifest("a"), manifest("a")]}
    )
    assert only_problem(dup) == (
        "pools.yaml: items[1].metadata.name: duplicate pool name 'a' "
        "(first defined in pools.yaml: items[0])"
    )


# --- files, directories, stdin ----------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ManifestError) as info:
        load_manifests(path)
    assert info.value.problems == [f"{path}: no such file or directory"]


def test_file_problems_are_prefixed_with_the_file_name(tmp_path: Path) -> None:
    path = tmp_path / "pools.yaml"
    path.write_text(ARTICLE + "---\n" + ARTICLE.replace("replicas: 50", "replicas: 501"))
    with pytest.raises(ManifestError) as info:
        load_manifests(str(path))
    assert info.value.problems == [
        f"{path}[1]: spec.replicas: must be <= 500, got 501",
    ]


def test_empty_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("---\n")
    with pytest.raises(ManifestError) as info:
        load_manifests(path)
    assert str(info.value) == f"{path}: no documents (expected a DevicePool manifest)"


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + ARTICLE.encode())
    assert [p.name for p in load_manifests(path)] == ["tiktok-us-pool"]


def test_directory(tmp_path: Path) -> None:
    (tmp_path / "b.yml").write_text(yaml.safe_dump(manifest("b")))
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(manifest("a")))
    (tmp_path / "c.json").write_text(json.dumps(manifest("c")))
    (tmp_path / "README.md").write_text("not a manifest")
    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / "d.yaml").write_text(yaml.safe_dump(manifest("d")))
    assert [p.name for p in load_manifests(tmp_path)] == ["a", "b", "c"]


def test_directory_collects_problems_of_every_file(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(manifest("a", replicas=501)))
    (tmp_path / "b.yaml").write_text("a: b: c\n")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(manifest("c")))
    with pytest.raises(ManifestError) as info:
        load_manifests(tmp_path)
    assert info.value.problems == [
        f"{tmp_path / 'a.yaml'}: spec.replicas: must be <= 500, got 501",
        f"{tmp_path / 'b.yaml'}: line 1, column 5: mapping values are not allowed here"
        " (quote a value that holds ': ')",
    ]


def test_duplicate_names_across_files(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(manifest("same")))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(manifest("same")))
    with pytest.raises(ManifestError) as info:
        load_manifests(tmp_path)
    assert info.value.problems == [
        f"{tmp_path / 'b.yaml'}: metadata.name: duplicate pool name 'same' "
        f"(first defined in {tmp_path / 'a.yaml'})"
    ]


def test_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as info:
        load_manifests(tmp_path)
    assert str(info.value) == f"{tmp_path}: no manifest files (*.yaml, *.yml, *.json)"


def test_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(ARTICLE))
    assert [p.name for p in load_manifests("-")] == ["tiktok-us-pool"]


def test_stdin_problems_say_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(ARTICLE.replace("replicas: 50", "replicas: 501")))
    with pytest.raises(ManifestError) as info:
        load_manifests("-")
    assert str(info.value) == "<stdin>: spec.replicas: must be <= 500, got 501"


# --- parse_pool, format_validation_error, ManifestError ---------------------------


def test_parse_pool() -> None:
    assert parse_pool(manifest("a")).name == "a"
    with pytest.raises(ManifestError) as info:
        parse_pool(manifest("a", replicas=501))
    assert str(info.value) == "<input>: spec.replicas: must be <= 500, got 501"
    with pytest.raises(ManifestError) as info:
        parse_pool(["not", "a", "mapping"], source="cli")
    assert str(info.value) == (
        "cli: must be a mapping with apiVersion, kind, metadata and spec, got a list"
    )


def test_format_validation_error_on_a_spec_alone() -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        DevicePoolSpec.model_validate(
            {"platform": "ios", "region": "x", "replicas": 1, "proxy": {"pol": "x"}}
        )
    # One mistake, one line: no "proxy.poolRef: required" next to the typo.
    assert format_validation_error(info.value, prefix="scale: ") == [
        "scale: proxy.pol: unknown field (did you mean 'poolRef'?)",
    ]


def test_format_validation_error_on_the_root() -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        DevicePool.model_validate("nope")
    assert format_validation_error(info.value) == ["must be a mapping, got 'nope'"]


def test_manifest_error_is_a_value_error_and_pickles() -> None:
    error = ManifestError(["a: x", "b: y"])
    assert isinstance(error, ValueError)
    assert str(error) == "2 problems:\n  a: x\n  b: y"
    assert str(ManifestError(["a: x"])) == "a: x"
    copy = pickle.loads(pickle.dumps(error))
    assert copy.problems == ["a: x", "b: y"]
    assert str(copy) == str(error)


# --- the replicas bound, exhaustively-ish -----------------------------------------


@pytest.mark.parametrize("replicas", [0, 1, MAX_REPLICAS])
def test_replicas_in_range(replicas: int) -> None:
    assert parse_pool(manifest(replicas=replicas)).spec.replicas == replicas


@pytest.mark.parametrize(
    ("replicas", "rule"),
    [(-1, "must be >= 0, got -1"), (501, "must be <= 500, got 501")],
)
def test_replicas_out_of_range(replicas: int, rule: str) -> None:
    with pytest.raises(ManifestError) as info:
        parse_pool(manifest(replicas=replicas))
    assert str(info.value) == f"<input>: spec.replicas: {rule}"


@given(st.integers(min_value=0, max_value=MAX_REPLICAS))
def test_any_replicas_in_range_is_accepted(replicas: int) -> None:
    assert parse_pool(manifest(replicas=replicas)).spec.replicas == replicas


@given(st.integers(max_value=-1) | st.integers(min_value=MAX_REPLICAS + 1))
def test_any_replicas_out_of_range_is_refused(replicas: int) -> None:
    with pytest.raises(ManifestError, match=r"^<input>: spec\.replicas: must be [<>]="):
        parse_pool(manifest(replicas=replicas))


@given(st.booleans() | st.floats().filter(lambda f: not f.is_integer()))
def test_booleans_and_fractions_are_never_replicas(value: bool | float) -> None:
    with pytest.raises(
        ManifestError,
        match=r"^<input>: spec\.replicas: must be (an integer|a finite number), got \S+$",
    ):
        parse_pool(manifest(replicas=value))


# --- YAML and Kubernetes habits ---------------------------------------------------


def test_control_character_names_line_and_column() -> None:
    assert only_problem("a: b\n\t\x00") == (
        "pools.yaml: line 2, column 2: special characters are not allowed: '\\x00'"
    )


def test_norway_problem_gets_a_hint() -> None:
    assert only_problem(ARTICLE.replace("region: us-west", "region: no")) == (
        "pools.yaml: spec.region: must be a string, got false "
        "(quote it: YAML reads yes/no/on/off as booleans)"
    )


def test_non_string_key() -> None:
    text = ARTICLE.replace("replicas: 50", "replicas: 50\n  1: x")
    assert only_problem(text) == "pools.yaml: spec: keys must be strings, got 1"


def test_kubernetes_namespace_is_explained() -> None:
    text = ARTICLE.replace("name: tiktok-us-pool", "name: tiktok-us-pool\n  namespace: default")
    assert only_problem(text) == (
        "pools.yaml: metadata.namespace: unknown field "
        "(pools have no namespace; the Temporal namespace scopes them)"
    )


def test_labels_and_annotations_are_kept() -> None:
    text = ARTICLE.replace(
        "name: tiktok-us-pool", "name: tiktok-us-pool\n  labels:\n    team: growth"
    )
    [pool] = load_manifests_text(text)
    assert pool.metadata.labels == {"team": "growth"}


# --- long values ------------------------------------------------------------------

FULL = {
    "apiVersion": "mobile.example.com/v1alpha1",
    "kind": "DevicePool",
    "metadata": {"name": "p", "labels": {"team": "growth"}},
    "spec": {
        "provider": "bitcloudphone",
        "platform": "android",
        "region": "us-west",
        "osVersion": "14",
        "replicas": 3,
        "providerCredentialRef": "default",
        "maxUnhealthy": "40%",
        "proxy": {"poolRef": "proxyseller-us", "stickyTTL": 900},
    },
}


def _with(path: tuple[str, ...], *, value: Any = None, key: str | None = None) -> dict[str, Any]:
    document = json.loads(json.dumps(FULL))
    parent = document
    for segment in path[:-1]:
        parent = parent[segment]
    if key is None:
        parent[path[-1]] = value
    else:
        parent[key] = parent.pop(path[-1])
    return document


@pytest.mark.parametrize("path", field_paths(FULL), ids=".".join)
@pytest.mark.parametrize("how", ["value", "digits", "key"])
def test_a_long_value_or_key_is_shortened_in_its_error(path: tuple[str, ...], how: str) -> None:
    # A mutation fuzz of the loader found 5,000-character "one-line" errors:
    # every field, its value or its key replaced by 5,000 characters.
    long = "9" * 5000 if how == "digits" else "x" * 5000
    document = _with(path, key=long) if how == "key" else _with(path, value=long)
    for text in (json.dumps(document), yaml.safe_dump(document)):
        # Some fields take a long value (a region has no length limit): then
        # there is no error to check.
        problems = _problems_if_any(text)
        assert all(len(problem) < 300 for problem in problems), [p[:300] for p in problems]


def _problems_if_any(text: str) -> list[str]:
    try:
        load_manifests_text(text, source="pools.yaml")
    except ManifestError as exc:
        return exc.problems
    return []


def test_a_long_value_is_quoted_shortened_with_its_length() -> None:
    text = ARTICLE.replace("platform: android", "platform: " + "a" * 5000)
    assert only_problem(text) == (
        "pools.yaml: spec.platform: must be one of android, ios, "
        f"got '{'a' * 59}…' (5000 characters)"
    )


def test_a_long_unknown_key_is_shortened() -> None:
    text = ARTICLE.replace("replicas: 50", "replicas: 50\n  " + "k" * 1000 + ": 1")
    assert only_problem(text).startswith(f"pools.yaml: spec.{'k' * 59}…: unknown field")


def test_a_long_number_is_shortened() -> None:
    text = ARTICLE.replace("replicas: 50", "replicas: " + "9" * 100)
    assert only_problem(text) == (
        f"pools.yaml: spec.replicas: must be <= 500, got {'9' * 59}… (100 digits)"
    )


@pytest.mark.parametrize("json_text", [False, True])
def test_a_number_too_long_for_python_is_a_manifest_error(json_text: bool) -> None:
    # Python refuses to read an integer of more than 4,300 digits (a ValueError
    # from YAML's or JSON's int()); it must still be a one-line ManifestError.
    if json_text:
        text = json.dumps(manifest()).replace('"replicas": 3', '"replicas": ' + "9" * 5000)
    else:
        text = ARTICLE.replace("replicas: 50", "replicas: " + "9" * 5000)
    message = only_problem(text)
    assert message.startswith("pools.yaml: line "), message
    assert message.endswith("a number of 5000 digits is too long"), message


# --- deep nesting -----------------------------------------------------------------

DEEP = 200_000
TOO_DEEP = "nesting deeper than 100 levels"


def _alias_chain(anchors: int = 5, depth: int = 50) -> str:
    # Each anchor is 50 mappings deep, with the previous one at its bottom: no
    # line of the text is deeper than 52 levels, yet `y` is 250 levels deep
    # once the aliases are followed, past what PyYAML's constructor recurses.
    lines = []
    for i in range(anchors):
        bottom = f"*a{i - 1}" if i else "1"
        lines.append(f"x{i}: [&a{i} " + "{k: " * depth + bottom + "}" * depth + "]")
    lines.append(f"y: *a{anchors - 1}")
    return "\n".join(lines) + "\n"


def _in_region(nested: str) -> str:
    return ARTICLE.replace("region: us-west", f"region: {nested}")


def _json_region(nested: str) -> str:
    return json.dumps(manifest()).replace('"us-west"', nested)


# (text, where): the 101st level opens at `where`. `region:` is at level 3
# (the document, spec), so there the 99th bracket is the one too many.
DEEP_CASES: dict[str, tuple[Callable[[], str], str]] = {
    "json-list": (lambda: "[" * DEEP + "]" * DEEP, "line 1, column 101: "),
    "json-object": (lambda: '{"a":' * DEEP + "1" + "}" * DEEP, "line 1, column 501: "),
    "json-manifest": (
        lambda: _json_region("[" * DEEP + "]" * DEEP),
        f"line 1, column {_json_region('[').index('[') + 99}: ",
    ),
    # Deep enough to refuse, not so deep that Python's json module gives up.
    "json-500": (lambda: "[" * 500 + "]" * 500, "line 1, column 101: "),
    "yaml-flow-list": (lambda: _in_region("[" * 5000 + "]" * 5000), "line 8, column 109: "),
    "yaml-flow-list-200k": (lambda: "a: " + "[" * DEEP + "]" * DEEP, "line 1, column 103: "),
    "yaml-flow-mapping": (
        lambda: _in_region("{a: " * 5000 + "1" + "}" * 5000),
        "line 8, column 403: ",
    ),
    "yaml-block-list": (lambda: "- " * 5000 + "x\n", "line 1, column 201: "),
    "yaml-block-mapping": (
        lambda: "".join(" " * i + "a:\n" for i in range(1000)) + " " * 1000 + "b\n",
        "line 101, column 101: ",
    ),
    # Too deep only through aliases: no place in the text to name.
    "yaml-aliases": (_alias_chain, ""),
}


@pytest.mark.parametrize("case", DEEP_CASES)
def test_deep_nesting_is_one_short_line_quickly(case: str) -> None:
    # `devicepool apply -f` of such a file ended in a RecursionError traceback.
    make_text, where = DEEP_CASES[case]
    text = make_text()
    tracemalloc.start()
    started = time.perf_counter()
    try:
        message = only_problem(text)
    finally:
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert message == f"pools.yaml: {where}{TOO_DEEP}"
    # A guard against a blow-up (a quadratic scan of 200,000 levels takes minutes),
    # not a timing target: well under 0.4 s alone, 2.05 s once under the full
    # suite's load with tracemalloc on (fresh-clone CI).
    assert elapsed < 15, f"{elapsed:.1f} s"
    assert peak < 20_000_000, f"{peak / 1e6:.0f} MB"


def test_deep_nesting_of_one_file_is_reported_with_the_others(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("[" * DEEP + "]" * DEEP)
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(manifest("b", replicas=501)))
    with pytest.raises(ManifestError) as info:
        load_manifests(tmp_path)
    assert info.value.problems == [
        f"{tmp_path / 'a.json'}: line 1, column 101: {TOO_DEEP}",
        f"{tmp_path / 'b.yaml'}: spec.replicas: must be <= 500, got 501",
    ]


@pytest.mark.parametrize(
    ("text", "too_deep"),
    [
        ("[" * 100 + "]" * 100, None),
        ("[" * 101 + "]" * 101, "line 1, column 101"),
        ("- " * 100 + "x\n", None),
        ("- " * 101 + "x\n", "line 1, column 201"),
    ],
    ids=["json-100", "json-101", "yaml-100", "yaml-101"],
)
def test_a_hundred_levels_are_read(text: str, too_deep: str | None) -> None:
    if too_deep is None:
        assert only_problem(text) == (
            "pools.yaml: must be a mapping with apiVersion, kind, metadata and spec, got a list"
        )
    else:
        assert only_problem(text) == f"pools.yaml: {too_deep}: {TOO_DEEP}"


# --- every problem is one short line ----------------------------------------------

# What a problem may say after its source (`pools.yaml: `).
LINE_BOUND = 200


def _assert_short_lines(text: str) -> None:
    for problem in _problems_if_any(text):
        assert problem.startswith("pools.yaml"), problem
        said = problem.split(": ", 1)[1]
        assert len(said) <= LINE_BOUND, (len(said), problem[:400])
        assert problem.splitlines() == [problem], problem[:400]


@st.composite
def _mangled_article(draw: st.DrawFn) -> str:
    """The article's text with a few characters replaced by random text (syntax errors)."""
    start = draw(st.integers(0, len(ARTICLE)))
    end = draw(st.integers(start, min(len(ARTICLE), start + 20)))
    return ARTICLE[:start] + draw(TEXT) + ARTICLE[end:]


def _json_with(path: tuple[str, ...], *, value: Any = None, key: str | None = None) -> str:
    return json.dumps(_with(path, value=value, key=key))


@settings(max_examples=300, deadline=None)
@given(mutated(FULL) | _mangled_article())
# Found by the mutation fuzz: escapes make a 60-character value hundreds of
# characters long, and a key holding a line break broke the line in two.
@example(_json_with(("spec", "platform"), value="\x00" * 60))
@example(_json_with(("spec", "maxUnhealthy"), value="\U000e0001" * 60))
@example(_json_with(("kind",), value="\x85" * 40))
@example(_json_with(("metadata", "name"), value="\U000e0001" * 63))
@example(_json_with(("spec", "region"), key="region\nfoo"))
@example(_json_with(("spec", "replicas"), key="\u2028"))
@example(_json_with(("metadata", "labels", "team"), key="\r" * 70))
@example(_json_with(("metadata", "labels", "team"), key="\x00" * 59 + "a"))
@example(_json_with(("status",), value={"k" * 60: 1}))
def test_a_mutated_manifest_gets_one_short_line_per_problem(text: str) -> None:
    _assert_short_lines(text)


@pytest.mark.parametrize(
    "text",
    [
        f"{'k' * 1000}: 1\n{'k' * 1000}: 2\n",  # duplicate key
        "a: *" + "x" * 5000 + "\n",  # undefined alias
        "a: !" + "x" * 5000 + " 1\n",  # unknown tag
        "a: !<" + "x" * 5000 + "> 1\n",
    ],
    ids=["duplicate-key", "alias", "tag", "verbatim-tag"],
)
def test_a_long_yaml_token_is_shortened_in_its_syntax_error(text: str) -> None:
    _assert_short_lines(text)
    assert _problems_if_any(text)


def test_many_problems_are_one_a_line_and_the_rest_counted() -> None:
    # Issue 23 #11 bounded the CLI's message; issue 28: one problem a line, not
    # one 900-character line.
    docs = "\n---\n".join(
        ARTICLE.replace("tiktok-us-pool", f"pool-{i}").replace("replicas: 50", "replicas: 501")
        for i in range(40)
    )
    with pytest.raises(ManifestError) as info:
        load_manifests_text(docs, source="pools.yaml")
    assert len(info.value.problems) == 40
    lines = str(info.value).splitlines()
    assert lines[0] == "40 problems:"
    assert lines[1:3] == [
        "  pools.yaml[0]: spec.replicas: must be <= 500, got 501",
        "  pools.yaml[1]: spec.replicas: must be <= 500, got 501",
    ]
    assert len(lines) == 1 + 20 + 1 and lines[-1] == "  and 20 more problem(s)"
