"""The wire contract passes ``buf lint`` (STANDARD and COMMENTS rules, protos/buf.yaml).

``buf`` is the npm package ``@bufbuild/buf``, pinned in ``protos/package.json`` and
installed by ``tests/run.sh`` (``npm ci --prefix protos``). Without it these tests fail.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.support import ROOT

PROTOS = ROOT / "protos"
BUF = PROTOS / "node_modules" / ".bin" / "buf"


def _buf_lint(module: Path) -> subprocess.CompletedProcess[str]:
    assert BUF.exists(), f"{BUF} is missing: run `npm ci --prefix protos` (tests/run.sh does)"
    return subprocess.run(
        [str(BUF), "lint", "--error-format", "text"],
        cwd=module,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_protos_pass_buf_lint() -> None:
    lint = _buf_lint(PROTOS)
    assert lint.returncode == 0, f"buf lint:\n{lint.stdout}{lint.stderr}"
    assert lint.stdout == ""


def test_buf_lint_refuses_an_undocumented_field(tmp_path: Path) -> None:
    """The COMMENTS rules are on: a message or field without a leading comment fails,
    so the clean run above means every element is documented."""
    module = tmp_path / "protos"
    shutil.copytree(PROTOS / "runwick", module / "runwick")
    shutil.copy(PROTOS / "buf.yaml", module / "buf.yaml")
    proto = module / "runwick" / "v1" / "worker_service.proto"
    proto.write_text(proto.read_text() + "\nmessage Undocumented {\n  string field = 1;\n}\n")
    lint = _buf_lint(module)
    assert lint.returncode != 0
    assert 'Message "Undocumented" should have a non-empty comment' in lint.stdout
    assert 'Field "field" should have a non-empty comment' in lint.stdout


def test_buf_lint_wants_the_stream_messages_named_after_their_rpc(tmp_path: Path) -> None:
    """STANDARD's RPC_REQUEST_STANDARD_NAME: the rename to ConnectRequest/ConnectResponse
    is what the rule asks; the old names would fail."""
    module = tmp_path / "protos"
    shutil.copytree(PROTOS / "runwick", module / "runwick")
    shutil.copy(PROTOS / "buf.yaml", module / "buf.yaml")
    proto = module / "runwick" / "v1" / "worker_service.proto"
    proto.write_text(proto.read_text().replace("ConnectRequest", "WorkerMessage"))
    lint = _buf_lint(module)
    assert lint.returncode != 0
    assert 'RPC request type "WorkerMessage" should be named "ConnectRequest"' in lint.stdout
