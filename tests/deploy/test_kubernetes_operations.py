"""Operating the Kubernetes manifests: an upgrade is a plain ``kubectl apply -k`` (no
object keeps its name while changing a field Kubernetes will not change in place),
secrets reach the pods only as files, a second validator (checkov) passes them, and the
optional components (alerts as a PrometheusRule, TLS from cert-manager) and parameters
do what the README says."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from coordinator.cli import build_parser
from tests.deploy.manifests import (
    DEPLOY,
    OVERLAYS,
    Doc,
    containers,
    coordinator,
    copy_tree,
    env,
    of_kind,
    pod_templates,
    render,
    the,
    write_overlay,
)
from tests.support import tool

IMMUTABLE: dict[str, tuple[str, ...]] = {
    # Fields the API server refuses to change on an existing object: an apply that
    # changes one fails until the object is deleted (a Job's template is the classic).
    "Deployment": ("spec.selector",),
    "StatefulSet": (
        "spec.selector",
        "spec.serviceName",
        "spec.volumeClaimTemplates",
        "spec.podManagementPolicy",
    ),
    "DaemonSet": ("spec.selector",),
    "Job": ("spec.template", "spec.selector", "spec.completionMode"),
    "CronJob": (),
    "PersistentVolumeClaim": (
        "spec.accessModes",
        "spec.storageClassName",
        "spec.volumeMode",
        "spec.volumeName",
    ),
    "Service": ("spec.clusterIP", "spec.clusterIPs", "spec.ipFamilies"),
}
NEW_VERSION = "0.2.0"
CHECKOV_SKIPS = {
    "CKV_K8S_43": "image digests: the installer pins one with `images: digest:` in an overlay",
    "CKV_K8S_15": "imagePullPolicy Always: release tags never move, so IfNotPresent pulls each once",
    "CKV_K8S_21": "the default namespace: the installer chooses one (`namespace:` or kubectl -n)",
}
"""Checks that do not apply to manifests meant to be overlaid, each with its reason."""
CHECKOV = str(Path(sys.executable).with_name("checkov"))
"""The dev extra installs checkov beside this interpreter (tests/run.sh)."""


def field(doc: Doc, path: str) -> Any:
    value: Any = doc
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def objects(docs: list[Doc]) -> dict[tuple[str, str], Doc]:
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in docs}


@pytest.mark.parametrize("overlay", ["sqlite", "postgres", "full"])
def test_an_upgrade_is_a_plain_apply(tmp_path: Path, overlay: str) -> None:
    """Rendered again with a new image tag and version, as the README tells an operator
    to upgrade, every object that keeps its name keeps its immutable fields."""
    tree = copy_tree(tmp_path)
    upgrade = tree / "overlays" / "upgrade"
    write_overlay(
        upgrade,
        {
            "resources": [f"../{overlay}"],
            "images": [{"name": "runwick", "newTag": NEW_VERSION}],
            "labels": [
                {
                    "pairs": {"app.kubernetes.io/version": NEW_VERSION},
                    "includeSelectors": False,
                    "includeTemplates": True,
                }
            ],
        },
    )
    before, after = objects(render(tree / "overlays" / overlay)), objects(render(upgrade))
    assert before.keys() == after.keys()  # nothing left behind, nothing to delete by hand
    images = {c["image"] for _, t in pod_templates(list(after.values())) for c in containers(t["spec"])}
    assert images == {f"runwick:{NEW_VERSION}"}  # the upgrade does change the pods
    for key, old in before.items():
        for path in IMMUTABLE.get(old["kind"], ()):
            assert field(old, path) == field(after[key], path), (key, path)
        assert not old.get("immutable"), key  # an immutable ConfigMap or Secret could not change
        assert after[key]["metadata"]["labels"]["app.kubernetes.io/version"] == NEW_VERSION, key
    assert not [key for key in before if key[0] == "Job"]  # a Job's template can never change


def test_every_object_carries_the_version_of_its_image_and_no_selector_does(
    overlays: dict[str, list[Doc]],
) -> None:
    for name, docs in overlays.items():
        tag = coordinator(docs)["image"].rsplit(":", 1)[1]
        for doc in docs:
            assert doc["metadata"]["labels"]["app.kubernetes.io/version"] == tag, (name, doc["kind"])
        for _, template in pod_templates(docs):
            assert template["metadata"]["labels"]["app.kubernetes.io/version"] == tag
        selectors = [
            the(docs, "Deployment")["spec"]["selector"],
            the(docs, "Service")["spec"]["selector"],
            the(docs, "NetworkPolicy")["spec"]["podSelector"],
            *(budget["spec"]["selector"] for budget in of_kind(docs, "PodDisruptionBudget")),
        ]
        assert "app.kubernetes.io/version" not in json.dumps(selectors)  # selectors stay put


def test_secrets_reach_the_pods_as_files_only(overlays: dict[str, list[Doc]]) -> None:
    for name, docs in overlays.items():
        for where, template in pod_templates(docs):
            pod = template["spec"]
            secret_volumes = {v["name"]: v["secret"] for v in pod.get("volumes", []) if "secret" in v}
            for container in containers(pod):
                assert "envFrom" not in container, where
                for item in container.get("env", []):
                    assert "secretKeyRef" not in item.get("valueFrom", {}), (name, where, item["name"])
                mounts = {m["name"]: m for m in container.get("volumeMounts", [])}
                for volume in secret_volumes.keys() & mounts.keys():
                    assert mounts[volume]["readOnly"] is True, (where, volume)
            for volume in secret_volumes.values():
                assert volume["defaultMode"] & 0o007 == 0, where  # not world-readable
        settings = env(coordinator(docs))
        token = settings["RUNWICK_BOOTSTRAP_TOKEN_FILE"]
        assert mounted_from(docs, token) == ("runwick-admin-token", "token"), name
        if "RUNWICK_DATABASE_URL_FILE" in settings:
            assert mounted_from(docs, settings["RUNWICK_DATABASE_URL_FILE"]) == ("runwick-database", "url")


def mounted_from(docs: list[Doc], path: str) -> tuple[str, str]:
    """The (Secret, key) the coordinator container sees at ``path``."""
    pod = the(docs, "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in coordinator(docs)["volumeMounts"]:
        if path.startswith(mount["mountPath"] + "/"):
            secret = volumes[mount["name"]]["secret"]
            [key] = [i["key"] for i in secret["items"] if i["path"] == path[len(mount["mountPath"]) + 1 :]]
            return secret["secretName"], key
    raise AssertionError(f"nothing is mounted at {path}")


def command_help(name: str) -> str:
    """``runwick NAME --help``: every setting names its environment variable there."""
    parser = build_parser()
    [commands] = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return str(commands.choices[name].format_help())


def test_every_setting_the_manifests_pass_is_one_the_command_reads(overlays: dict[str, list[Doc]]) -> None:
    helps = {name: command_help(name) for name in ("serve", "migrate")}
    for docs in overlays.values():
        for _, template in pod_templates(docs):
            for container in containers(template["spec"]):
                [command] = container["args"]
                for name in env(container):
                    assert re.search(rf"\b{name}\b", helps[command]), (command, name)


def test_replicas_spread_over_zones_then_nodes(overlays: dict[str, list[Doc]]) -> None:
    spec = the(overlays["postgres"], "Deployment")["spec"]
    constraints = spec["template"]["spec"]["topologySpreadConstraints"]
    keys = [c["topologyKey"] for c in constraints]
    assert keys == ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
    for constraint in constraints:
        assert constraint["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]
        assert constraint["whenUnsatisfiable"] == "ScheduleAnyway"


def monitoring_namespace(docs: list[Doc]) -> str:
    [rule] = [r for r in the(docs, "NetworkPolicy")["spec"]["ingress"] if r["ports"][0]["port"] == 9233]
    [source] = rule["from"]
    return str(source["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"])


def test_the_monitoring_namespace_is_a_parameter(overlays: dict[str, list[Doc]]) -> None:
    for name in ("sqlite", "postgres", "monitored"):
        assert monitoring_namespace(overlays[name]) == "monitoring"
    assert monitoring_namespace(overlays["full"]) == "observability"
    parameters = {doc["metadata"]["name"]: doc for doc in of_kind(overlays["full"], "ConfigMap")}
    assert parameters["runwick-parameters"]["data"]["monitoringNamespace"] == "observability"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_serves_tls_from_a_cert_manager_certificate(
    overlays: dict[str, list[Doc]], overlay: str
) -> None:
    """TLS is the default: no overlay sends tokens to the API port in clear."""
    docs = overlays[overlay]
    certificate = the(docs, "Certificate")
    assert certificate["apiVersion"] == "cert-manager.io/v1"
    service = the(docs, "Service")
    namespace = service["metadata"].get("namespace", "default")  # the parameter's default
    assert certificate["spec"]["dnsNames"] == [
        "runwick",
        f"runwick.{namespace}.svc",
        f"runwick.{namespace}.svc.cluster.local",
    ]
    assert {"name", "kind"} <= certificate["spec"]["issuerRef"].keys()
    settings = env(coordinator(docs))
    for variable, key in (("RUNWICK_TLS_CERT", "tls.crt"), ("RUNWICK_TLS_KEY", "tls.key")):
        assert mounted_from(docs, settings[variable]) == (certificate["spec"]["secretName"], key)
    [api] = [port for port in service["spec"]["ports"] if port["name"] == "grpc"]
    assert api["appProtocol"] == "https"  # no longer cleartext HTTP/2
    # The probes stay on the plaintext health port, which TLS leaves alone.
    probes = {coordinator(docs)[kind]["grpc"]["port"] for kind in ("startupProbe", "readinessProbe")}
    assert probes == {int(settings["RUNWICK_HEALTH_PORT"])}


# -- alerts as a PrometheusRule ----------------------------------------------------------


def test_the_service_monitor_component_ships_the_alert_rules_as_a_prometheus_rule(
    overlays: dict[str, list[Doc]], tmp_path: Path
) -> None:
    assert not of_kind(overlays["postgres"], "PrometheusRule")  # optional: only when added
    rule = the(overlays["monitored"], "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    rules_file = DEPLOY / "prometheus" / "runwick-rules.yml"
    assert rule["spec"]["groups"] == yaml.safe_load(rules_file.read_text())["groups"]  # the same alerts
    # What the operator loads, checked and unit-tested like the rules file.
    extracted = tmp_path / "runwick-rules.yml"
    extracted.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    tests = yaml.safe_load((DEPLOY / "prometheus" / "tests" / "runwick-rules.test.yml").read_text())
    tests["rule_files"] = [str(extracted)]
    test_file = tmp_path / "rules.test.yml"
    test_file.write_text(yaml.safe_dump(tests, sort_keys=False))
    for command in (["check", "rules", str(extracted)], ["test", "rules", str(test_file)]):
        result = subprocess.run(
            [tool("promtool"), *command], capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr


# -- a second validator ------------------------------------------------------------------


def checkov(directory: Path) -> dict[str, dict[str, list[str]]]:
    """checkov's verdicts on every file in ``directory``: file -> passed/failed check IDs.
    Offline: nothing is downloaded."""
    result = subprocess.run(
        [
            CHECKOV,
            *("--directory", str(directory), "--framework", "kubernetes", "--output", "json"),
            *("--skip-check", ",".join(CHECKOV_SKIPS), "--skip-download", "--soft-fail"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(result.stdout)
    verdicts: dict[str, dict[str, list[str]]] = {}
    for kind in ("passed_checks", "failed_checks"):
        for check in report["results"][kind]:
            file = Path(check["file_path"]).name
            verdicts.setdefault(file, {"passed_checks": [], "failed_checks": []})[kind].append(
                f"{check['check_id']} {check['resource']}"
            )
    return verdicts


def test_checkov_passes_every_overlay_and_catches_a_secret_in_the_environment(
    overlays: dict[str, list[Doc]], tmp_path: Path
) -> None:
    for name in OVERLAYS:
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump_all(overlays[name]))
    # The same manifests with the database URL back in an environment variable.
    broken = yaml.safe_load_all((tmp_path / "postgres.yaml").read_text())
    docs = [doc for doc in broken if doc]
    coordinator(docs)["env"].append(
        {
            "name": "RUNWICK_DATABASE_URL",
            "valueFrom": {"secretKeyRef": {"name": "runwick-database", "key": "url"}},
        }
    )
    (tmp_path / "secret-in-env.yaml").write_text(yaml.safe_dump_all(docs))

    verdicts = checkov(tmp_path)
    for name in OVERLAYS:
        assert verdicts[f"{name}.yaml"]["failed_checks"] == [], name
        assert len(verdicts[f"{name}.yaml"]["passed_checks"]) >= 60, name
    failed = verdicts["secret-in-env.yaml"]["failed_checks"]
    assert [check for check in failed if check.startswith("CKV_K8S_35 ")], failed  # secrets as files
