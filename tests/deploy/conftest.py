from __future__ import annotations

import pytest

from tests.deploy.manifests import Doc, copy_tree, render_all


@pytest.fixture(scope="session")
def overlays(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Doc]]:
    """Each overlay's rendered objects: ours (sqlite, postgres) and the users' (monitored,
    full)."""
    return render_all(copy_tree(tmp_path_factory.mktemp("kustomize")))
