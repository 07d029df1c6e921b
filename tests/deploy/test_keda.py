"""The KEDA component (deploy/kubernetes/components/keda, docs/autoscaling.md), rendered
offline in overlays of a user's: its Kubernetes objects validate against the schema, and
its ScaledObject reaches the coordinator's scaler port by a name the certificate holds,
with metadata the coordinator accepts."""

from __future__ import annotations

import inspect
from datetime import timedelta
from pathlib import Path

import kubernetes_validate
import pytest

from coordinator.api.scaler import parse_trigger
from coordinator.config import ScalerLimits
from tests.deploy.manifests import CRD_GROUPS, Doc, copy_tree, env, of_kind, render, write_overlay
from tests.deploy.test_deploy import SCHEMA_VERSIONS
from worker_sdk import Worker

KEDA_OVERLAYS: dict[str, Doc] = {
    # The README's way: the postgres overlay plus the component, in the default namespace.
    "default": {"resources": ["../postgres"], "components": ["../../components/keda"]},
    # In a namespace of the user's, the parameters changed to match.
    "jobs": {
        "namespace": "jobs",
        "resources": ["../postgres"],
        "components": ["../../components/keda", "../../components/parameters"],
        "configMapGenerator": [
            {"name": "runwick-parameters", "behavior": "merge", "literals": ["namespace=jobs"]}
        ],
    },
}


@pytest.fixture(scope="module")
def scaled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Doc]]:
    tree = copy_tree(tmp_path_factory.mktemp("kustomize-keda"))
    rendered = {}
    for name, spec in KEDA_OVERLAYS.items():
        directory: Path = tree / "overlays" / f"keda-{name}"
        write_overlay(directory, spec)
        rendered[name] = render(directory)
    return rendered


def named(docs: list[Doc], kind: str, name: str) -> Doc:
    [doc] = [doc for doc in of_kind(docs, kind) if doc["metadata"]["name"] == name]
    return doc


@pytest.mark.parametrize("overlay", KEDA_OVERLAYS)
def test_the_keda_components_objects_validate_against_the_kubernetes_schema(
    scaled: dict[str, list[Doc]], overlay: str
) -> None:
    docs = scaled[overlay]
    assert {"ScaledObject", "TriggerAuthentication"} <= {doc["kind"] for doc in docs}
    for doc in docs:
        if doc["apiVersion"].startswith(CRD_GROUPS):
            continue  # ScaledObject, TriggerAuthentication, Certificate: checked below
        for version in SCHEMA_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize(("overlay", "namespace"), [("default", "default"), ("jobs", "jobs")])
def test_the_scaled_object_reaches_the_scaler_port_by_a_certified_name(
    scaled: dict[str, list[Doc]], overlay: str, namespace: str
) -> None:
    docs = scaled[overlay]
    coordinator = named(docs, "Deployment", "runwick")["spec"]["template"]["spec"]["containers"][0]
    ports = {port["name"]: port["containerPort"] for port in coordinator["ports"]}
    assert int(env(coordinator)["RUNWICK_SCALER_PORT"]) == ports["scaler"]
    service = named(docs, "Service", "runwick")
    [service_port] = [port for port in service["spec"]["ports"] if port["name"] == "scaler"]
    assert service_port["targetPort"] == "scaler"

    scaled_object = the_scaled_object(docs)
    [trigger] = scaled_object["spec"]["triggers"]
    assert trigger["type"] == "external-push"  # StreamIsActive: scale from zero at once
    host, _, port = trigger["metadata"]["scalerAddress"].rpartition(":")
    assert host == f"runwick.{namespace}.svc.cluster.local"
    assert int(port) == service_port["port"]
    assert host in named(docs, "Certificate", "runwick")["spec"]["dnsNames"]
    # The coordinator accepts the trigger's metadata as it is (KEDA's keys ignored).
    parse_trigger(trigger["metadata"], ScalerLimits(), 256)

    authentication = named(docs, "TriggerAuthentication", trigger["authenticationRef"]["name"])
    [ca] = authentication["spec"]["secretTargetRef"]
    assert (ca["parameter"], ca["key"]) == ("caCert", "ca.crt")
    assert ca["name"] == named(docs, "Certificate", "runwick")["spec"]["secretName"]

    [policy] = [p for p in of_kind(docs, "NetworkPolicy") if p["metadata"]["name"] == "runwick-scaler"]
    [rule] = policy["spec"]["ingress"]
    assert [p["port"] for p in rule["ports"]] == [ports["scaler"]]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "keda"}}}]


def the_scaled_object(docs: list[Doc]) -> Doc:
    [scaled_object] = of_kind(docs, "ScaledObject")
    target = scaled_object["spec"]["scaleTargetRef"]["name"]
    worker = named(docs, "Deployment", target)  # it scales a Deployment the component ships
    assert worker["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"
    return scaled_object


def test_the_worker_outlasts_its_drain_and_starts_at_zero(scaled: dict[str, list[Doc]]) -> None:
    docs = scaled["default"]
    scaled_object = the_scaled_object(docs)
    worker = named(docs, "Deployment", scaled_object["spec"]["scaleTargetRef"]["name"])
    assert worker["spec"]["replicas"] == scaled_object["spec"]["minReplicaCount"] == 0
    drain = inspect.signature(Worker).parameters["drain_timeout"].default  # the SDK's default
    assert isinstance(drain, timedelta)
    assert worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > drain.total_seconds()
