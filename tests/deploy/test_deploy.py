"""The deploy/ tree, checked offline: Kustomize overlays rendered by ``kubectl kustomize``
and validated against the Kubernetes schema (``kubernetes-validate``), the properties an
operator relies on, the Dockerfile, the Prometheus rules (``promtool``) and the dashboard.

Missing tools fail these tests (``tests/run.sh`` installs them); nothing is skipped.
"""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from typing import Any

import kubernetes_validate
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from prometheus_client import CollectorRegistry

from coordinator.cli import build_parser
from coordinator.metrics import CoordinatorMetrics
from tests.deploy.manifests import (
    CRD_GROUPS,
    DEPLOY,
    OVERLAYS,
    Doc,
    containers,
    coordinator,
    env,
    of_kind,
    pod_templates,
    the,
)
from tests.support import tool
from worker_sdk._metrics import WorkerMetrics

SCHEMA_VERSIONS = ("1.27.0", "1.31.0", "1.34.0", kubernetes_validate.latest_version())
"""Native gRPC probes are GA from 1.27, the budget's unhealthyPodEvictionPolicy from 1.31;
a recent one and the newest schema the validator ships."""
SERVER_STOP_GRACE_S = 5
"""``RunningCoordinator.stop`` gives the gRPC server at most this long after the drain."""


def cli_defaults(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    for name in ("RUNWICK_PORT", "RUNWICK_HEALTH_PORT", "RUNWICK_METRICS_PORT", "RUNWICK_DRAIN_TIMEOUT_S"):
        monkeypatch.delenv(name, raising=False)
    return vars(build_parser().parse_args(["serve"]))


# -- Kubernetes -------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_manifest_validates_against_the_kubernetes_schema(
    overlays: dict[str, list[Doc]], overlay: str
) -> None:
    docs = overlays[overlay]
    assert docs
    for doc in docs:
        if doc["apiVersion"].startswith(CRD_GROUPS):
            continue  # custom resources the validator does not know: their own tests check them
        for version in SCHEMA_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)


def test_probes_are_native_grpc_on_the_plaintext_health_port(
    overlays: dict[str, list[Doc]], monkeypatch: pytest.MonkeyPatch
) -> None:
    defaults = cli_defaults(monkeypatch)
    for docs in overlays.values():
        container = coordinator(docs)
        ports = {port["name"]: port["containerPort"] for port in container["ports"]}
        assert ports == {
            "grpc": defaults["port"],
            "health": defaults["health_port"],
            "metrics": defaults["metrics_port"],
            "dashboard": defaults["dashboard_port"],
        }
        settings = env(container)
        assert int(settings["RUNWICK_HEALTH_PORT"]) == ports["health"]
        assert int(settings["RUNWICK_PORT"]) == ports["grpc"]
        assert int(settings["RUNWICK_METRICS_PORT"]) == ports["metrics"]
        assert int(settings["RUNWICK_DASHBOARD_PORT"]) == ports["dashboard"]
        probes = {
            kind: container[kind]["grpc"] for kind in ("startupProbe", "livenessProbe", "readinessProbe")
        }
        assert {probe["port"] for probe in probes.values()} == {ports["health"]}
        assert probes["livenessProbe"]["service"] == probes["startupProbe"]["service"] == "liveness"
        assert probes["readinessProbe"]["service"] == "readiness"


def test_termination_grace_outlasts_prestop_drain_and_server_stop(overlays: dict[str, list[Doc]]) -> None:
    for docs in overlays.values():
        pod = the(docs, "Deployment")["spec"]["template"]["spec"]
        container = coordinator(docs)
        command = container["lifecycle"]["preStop"]["exec"]["command"]
        assert command[0] == "sleep"
        pre_stop_s = float(command[1])
        drain_s = float(env(container)["RUNWICK_DRAIN_TIMEOUT_S"])
        assert pod["terminationGracePeriodSeconds"] > pre_stop_s + drain_s + SERVER_STOP_GRACE_S


def test_sqlite_is_one_replica_recreated_on_a_volume_claim(overlays: dict[str, list[Doc]]) -> None:
    docs = overlays["sqlite"]
    deployment = the(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert not of_kind(docs, "PodDisruptionBudget")
    claim = the(docs, "PersistentVolumeClaim")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    [data] = [name for name, v in volumes.items() if "persistentVolumeClaim" in v]
    assert volumes[data]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    container = coordinator(docs)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    url = env(container)["RUNWICK_DATABASE_URL"]
    assert url.startswith("sqlite:///") and url.removeprefix("sqlite:///").startswith(mounts[data] + "/")


def test_postgres_is_replicated_with_a_budget_a_migrating_init_container_and_secret_files(
    overlays: dict[str, list[Doc]],
) -> None:
    docs = overlays["postgres"]
    deployment = the(docs, "Deployment")
    replicas = deployment["spec"]["replicas"]
    assert replicas > 1
    budget = the(docs, "PodDisruptionBudget")
    assert budget["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert 0 < budget["spec"]["maxUnavailable"] < replicas
    # A drain never waits on pods that serve nothing (every one, while the database is down).
    assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    pod = deployment["spec"]["template"]["spec"]
    [migrate] = pod["initContainers"]
    assert migrate["args"] == ["migrate"]
    assert migrate["image"] == coordinator(docs)["image"]  # the schema of the version that serves
    database = env(coordinator(docs))["RUNWICK_DATABASE_URL_FILE"]
    assert env(migrate)["RUNWICK_DATABASE_URL_FILE"] == database
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    for container in (migrate, coordinator(docs)):
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        [(path, name)] = [(p, n) for p, n in mounts.items() if database.startswith(p + "/")]
        assert volumes[name]["secret"]["secretName"] == "runwick-database"
        assert [item["path"] for item in volumes[name]["secret"]["items"]] == [database[len(path) + 1 :]]
    assert not of_kind(docs, "Job") and not of_kind(docs, "PersistentVolumeClaim")


def test_a_budget_comes_only_with_several_replicas(overlays: dict[str, list[Doc]]) -> None:
    for docs in overlays.values():
        replicas = the(docs, "Deployment")["spec"]["replicas"]
        assert bool(of_kind(docs, "PodDisruptionBudget")) == (replicas > 1)


def test_pods_run_restricted_non_root_with_resources(overlays: dict[str, list[Doc]]) -> None:
    for docs in overlays.values():
        for where, template in pod_templates(docs):
            pod = template["spec"]
            security = pod["securityContext"]
            assert security["runAsNonRoot"] is True, where
            assert security["runAsUser"] > 0 and security["runAsGroup"] > 0, where
            assert security["seccompProfile"] == {"type": "RuntimeDefault"}, where
            assert pod["automountServiceAccountToken"] is False, where
            for key in ("hostNetwork", "hostPID", "hostIPC"):
                assert not pod.get(key), where
            for container in containers(pod):
                context = container["securityContext"]
                assert context["allowPrivilegeEscalation"] is False, where
                assert context["readOnlyRootFilesystem"] is True, where
                assert context["runAsNonRoot"] is True, where
                assert context["capabilities"] == {"drop": ["ALL"]}, where
                assert not context.get("privileged"), where
                for bound in ("requests", "limits"):
                    # ephemeral-storage too: without it a pod filling /tmp or its log is
                    # evicted without a bound the scheduler knew of.
                    assert set(container["resources"][bound]) == {"cpu", "memory", "ephemeral-storage"}, where


def test_service_and_network_policy_cover_the_ports(overlays: dict[str, list[Doc]]) -> None:
    for docs in overlays.values():
        deployment = the(docs, "Deployment")
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        ports = {port["name"]: port["containerPort"] for port in coordinator(docs)["ports"]}
        service = the(docs, "Service")
        assert service["spec"]["selector"].items() <= labels.items()
        assert {p["name"]: p["targetPort"] for p in service["spec"]["ports"]} == {
            "grpc": "grpc",
            "metrics": "metrics",
            "dashboard": "dashboard",
        }
        policy = the(docs, "NetworkPolicy")
        assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
        admitted = {port["port"] for rule in policy["spec"]["ingress"] for port in rule["ports"]}
        # Health needs no rule: the kubelet's probes come from the node, always admitted.
        assert admitted == set(ports.values()) - {ports["health"]}
        for rule in policy["spec"]["ingress"]:
            assert rule.get("from"), rule  # every port from someone, never from anywhere
            if rule["ports"][0]["port"] == ports["dashboard"]:
                assert rule["from"] == [{"podSelector": {}}]  # this namespace only


def test_service_monitor_component_scrapes_the_metrics_port(overlays: dict[str, list[Doc]]) -> None:
    assert not of_kind(overlays["postgres"], "ServiceMonitor")  # optional: only when added
    docs = overlays["monitored"]
    monitor = the(docs, "ServiceMonitor")
    service = the(docs, "Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {port["name"] for port in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    assert re.fullmatch(r"\d+s", endpoint["interval"])


# -- container image -------------------------------------------------------------------


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = (DEPLOY / "docker" / "Dockerfile").read_text()
    joined = re.sub(r"\\\n\s*", " ", text)
    pairs = []
    for raw in joined.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            instruction, _, rest = line.partition(" ")
            pairs.append((instruction.upper(), rest.strip()))
    return pairs


def test_dockerfile_builds_a_small_non_root_image_of_the_coordinator(
    overlays: dict[str, list[Doc]], monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = dockerfile()
    args = dict(arg.split("=", 1) for kind, arg in steps if kind == "ARG" and "=" in arg)
    stages = [
        arg.split()[0].replace("${PYTHON_IMAGE}", args.get("PYTHON_IMAGE", ""))
        for kind, arg in steps
        if kind == "FROM"
    ]
    assert len(stages) == 2 and all(re.fullmatch(r"python:3\.11-slim(-\w+)?", stage) for stage in stages)
    final = steps[max(i for i, (kind, _) in enumerate(steps) if kind == "FROM") :]
    users = [arg for kind, arg in final if kind == "USER"]
    assert users and re.fullmatch(r"[1-9]\d*(:[1-9]\d*)?", users[-1])  # numeric, not root
    uid = int(users[-1].split(":")[0])
    for _, template in pod_templates(overlays["postgres"]):
        assert template["spec"]["securityContext"]["runAsUser"] == uid
    # Both distributions: the SDK (root) and runwick-coordinator (the coordinator, the command).
    assert any(
        kind == "RUN" and re.search(r"pip install .* \. \./packaging/coordinator$", arg)
        for kind, arg in steps
    )
    assert not any(kind == "ADD" for kind, _ in steps)  # no remote downloads into the image
    defaults = cli_defaults(monkeypatch)
    [exposed] = [arg for kind, arg in final if kind == "EXPOSE"]
    assert {int(port) for port in exposed.split()} == {
        defaults["port"],
        defaults["health_port"],
        defaults["metrics_port"],
        defaults["dashboard_port"],
    }
    assert [arg for kind, arg in final if kind == "ENTRYPOINT"] == ['["runwick"]']
    assert [arg for kind, arg in final if kind == "CMD"] == ['["serve"]']
    settings = " ".join(arg for kind, arg in steps if kind in ("ENV", "ARG"))
    assert not re.search(r"(TOKEN|PASSWORD|SECRET|KEY)\w*=", settings, re.IGNORECASE)  # no secrets baked in
    assert "RUNWICK_HOST=0.0.0.0" in settings
    assert (DEPLOY / "docker" / "Dockerfile.dockerignore").exists()


def locked_pins() -> dict[str, tuple[str, list[str]]]:
    """deploy/docker/requirements.lock as {name: (version, hashes)}."""
    text = (DEPLOY / "docker" / "requirements.lock").read_text()
    joined = re.sub(r"\\\n\s*", " ", text)
    pins = {}
    for line in joined.splitlines():
        if line.strip() and not line.startswith("#"):
            requirement, *options = line.split()
            # pip reads everything before the first option as one requirement: a second
            # name there ("alembic==1.20.1 alembic==1.20.1") fails the image's build.
            assert all(opt.startswith("--hash=") for opt in options), f"not one pinned requirement: {line}"
            name, _, version = requirement.partition("==")
            hashes = [opt.removeprefix("--hash=") for opt in options if opt.startswith("--hash=sha256:")]
            pins[canonicalize_name(name)] = (version, hashes)
    return pins


def test_the_image_installs_only_locked_hashed_versions_that_satisfy_pyproject() -> None:
    """A dependency added to pyproject.toml without re-locking fails here, as does a pin
    below a floor (the floors are set past known vulnerabilities)."""
    pins = locked_pins()
    assert pins and all(version and hashes for version, hashes in pins.values())
    wanted = []  # the SDK's dependencies and runwick-coordinator's, but the SDK itself
    for pyproject in (
        DEPLOY.parent / "pyproject.toml",
        DEPLOY.parent / "packaging/coordinator/pyproject.toml",
    ):
        wanted += tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    wanted = [spec for spec in wanted if Requirement(spec).name != "runwick"]
    assert len(wanted) > 15
    for spec in wanted:
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in deploy/docker/requirements.lock"
        assert requirement.specifier.contains(pins[name][0]), f"{name}=={pins[name][0]} breaks {spec}"
        for extra in requirement.extras:  # psycopg[binary] brings psycopg-binary
            assert canonicalize_name(f"{requirement.name}-{extra}") in pins
    steps = dockerfile()
    installs = [arg for kind, arg in steps if kind == "RUN" and "pip install" in arg]
    assert any("--require-hashes" in arg and "requirements.lock" in arg for arg in installs)
    # Runwick itself brings nothing unlocked: no dependencies, no isolated build env.
    assert all("--require-hashes" in arg or "--no-deps --no-build-isolation" in arg for arg in installs)


def test_the_build_context_holds_every_file_the_dockerfile_copies() -> None:
    """Dockerfile.dockerignore keeps everything out but what it names: a COPY of a path it
    does not let in fails the image's build (Docker cannot run here, so this is checked
    from the files). packaging/coordinator links to coordinator/, copied beside it, and
    the lock's source names both distributions."""
    allowed = [
        line[1:].rstrip("/")
        for line in (DEPLOY / "docker" / "Dockerfile.dockerignore").read_text().splitlines()
        if line.startswith("!")
    ]
    steps = dockerfile()
    sources = [
        source
        for kind, arg in steps
        if kind == "COPY" and not arg.startswith("--from")
        for source in arg.split()[:-1]
    ]
    assert "packaging/coordinator" in sources and "coordinator" in sources
    for source in sources:
        assert source in allowed, f"{source} is not in the build context"
        assert (DEPLOY.parent / source).exists(), source
    link = DEPLOY.parent / "packaging" / "coordinator" / "coordinator"
    assert link.is_symlink() and link.readlink().as_posix() == "../../coordinator"
    sources_of_the_lock = (DEPLOY / "docker" / "requirements.in").read_text().split("\n")
    assert {".", "./packaging/coordinator"} <= set(sources_of_the_lock)


# -- alerts and dashboard --------------------------------------------------------------


def metric_names() -> set[str]:
    """Every series name the coordinator and the SDK export (with counter and histogram
    suffixes), from their registries."""
    names = set()
    registries = [CoordinatorMetrics().registry]
    registry = CollectorRegistry()
    WorkerMetrics.for_registry(registry)
    registries.append(registry)
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"], "gauge": [""]}
    for each in registries:
        for family in each.collect():
            names.update(family.name + suffix for suffix in suffixes.get(family.type, [""]))
    return names


def referenced(expr: str) -> set[str]:
    return set(re.findall(r"\brunwick_[a-z_]+\b", expr))


def test_alert_rules_pass_promtool_and_their_unit_tests() -> None:
    promtool = tool("promtool")
    rules = DEPLOY / "prometheus" / "runwick-rules.yml"
    for command in (["check", "rules", str(rules)], ["test", "rules", "tests/runwick-rules.test.yml"]):
        result = subprocess.run(
            [promtool, *command], cwd=rules.parent, capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr
    alerts = {
        rule["alert"] for group in yaml.safe_load(rules.read_text())["groups"] for rule in group["rules"]
    }
    assert alerts == {
        "RunwickBacklogGrowing",
        "RunwickOldestJobTooOld",
        "RunwickHighFailureRate",
        "RunwickLeaseExpiries",
        "RunwickNoWorkers",
    }
    tested = (DEPLOY / "prometheus" / "tests" / "runwick-rules.test.yml").read_text()
    assert all(f"alertname: {alert}" in tested for alert in alerts)


def test_rules_and_dashboard_use_only_exported_metrics() -> None:
    known = metric_names()
    rules = yaml.safe_load((DEPLOY / "prometheus" / "runwick-rules.yml").read_text())
    exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    dashboard = json.loads((DEPLOY / "grafana" / "runwick-dashboard.json").read_text())
    panels = [panel for panel in dashboard["panels"] if panel["type"] != "row"]
    exprs += [target["expr"] for panel in panels for target in panel["targets"]]
    used = set().union(*(referenced(expr) for expr in exprs))
    assert used and used <= known, used - known
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])
    variables = {variable["name"] for variable in dashboard["templating"]["list"]}
    assert {"datasource", "queue"} <= variables
    assert all(panel["datasource"]["uid"] == "${datasource}" for panel in panels)
