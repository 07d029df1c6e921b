"""The Kustomize tree rendered as a user would: ``kubectl kustomize`` of the overlays in a
copy of ``deploy/kubernetes``, with the optional components added by overlays of the
user's own, and helpers to find objects in what it rendered."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.support import ROOT, tool

DEPLOY = ROOT / "deploy"
KUSTOMIZE = DEPLOY / "kubernetes"
CRD_GROUPS = ("monitoring.coreos.com/", "cert-manager.io/", "keda.sh/")
"""Custom resources the schema validator does not know: tests check them field by field."""

Doc = dict[str, Any]

USER_OVERLAYS: dict[str, Doc] = {
    # The README's way to add the Prometheus Operator objects.
    "monitored": {"resources": ["../postgres"], "components": ["../../components/servicemonitor"]},
    # Everything optional, in a namespace of the user's, with the parameters changed
    # (TLS is in every overlay already).
    "full": {
        "namespace": "jobs",
        "resources": ["../postgres"],
        "components": ["../../components/servicemonitor", "../../components/parameters"],
        "configMapGenerator": [
            {
                "name": "runwick-parameters",
                "behavior": "merge",
                "literals": ["monitoringNamespace=observability", "namespace=jobs"],
            }
        ],
    },
}
OVERLAYS = ("sqlite", "postgres", *USER_OVERLAYS)


def render(directory: Path) -> list[Doc]:
    rendered = subprocess.run(
        [tool("kubectl"), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert rendered.returncode == 0, rendered.stderr
    return [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]


def copy_tree(into: Path) -> Path:
    """A copy of ``deploy/kubernetes`` with the user overlays added; returns its root."""
    tree = into / "kubernetes"
    shutil.copytree(KUSTOMIZE, tree)
    for name, spec in USER_OVERLAYS.items():
        write_overlay(tree / "overlays" / name, spec)
    return tree


def write_overlay(directory: Path, spec: Doc) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    document = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", **spec}
    (directory / "kustomization.yaml").write_text(yaml.safe_dump(document, sort_keys=False))


def render_all(tree: Path) -> dict[str, list[Doc]]:
    return {name: render(tree / "overlays" / name) for name in OVERLAYS}


def of_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [doc for doc in docs if doc["kind"] == kind]


def the(docs: list[Doc], kind: str) -> Doc:
    [doc] = of_kind(docs, kind)
    return doc


def pod_templates(docs: list[Doc]) -> Iterator[tuple[str, Doc]]:
    for doc in docs:
        if doc["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            yield f"{doc['kind']}/{doc['metadata']['name']}", doc["spec"]["template"]


def containers(pod: Doc) -> list[Doc]:
    """A pod spec's init containers and containers."""
    return [*pod.get("initContainers", []), *pod["containers"]]


def coordinator(docs: list[Doc]) -> Doc:
    [container] = the(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return container  # type: ignore[no-any-return]


def env(container: Doc) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container.get("env", [])}
