"""Regenerates the committed Python code for the protobuf contract.

Usage: ``python protos/generate.py`` writes ``worker_sdk/proto/runwick/v1/`` (the wire
contract) and ``worker_sdk/proto/keda/`` (KEDA's external scaler contract, which the
coordinator serves); ``python protos/generate.py --check`` exits 1 when the committed
code is stale.

The generated modules import each other as ``runwick.v1.x_pb2``; that would need a
top-level ``runwick`` package on ``sys.path``, so the imports are rewritten to the
package the code actually lives in (``worker_sdk.proto.runwick.v1``); likewise ``keda``.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
OUTPUT_PACKAGE = "worker_sdk.proto"
OUTPUT_DIR = ROOT / "worker_sdk" / "proto"
GENERATED_SUBDIRS = (Path("runwick") / "v1", Path("keda"))

_IMPORT = re.compile(r"^from (runwick\.v1|keda) import ", re.MULTILINE)


def generate_into(out_dir: Path) -> dict[Path, str]:
    """Runs protoc into ``out_dir`` and returns the rewritten files by relative path."""
    from grpc_tools import protoc  # imported late: only needed by developers

    protos = [p for sub in GENERATED_SUBDIRS for p in (PROTO_ROOT / sub).glob("*.proto")]
    sources = sorted(str(p.relative_to(PROTO_ROOT)) for p in protos)
    include = Path(protoc.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *sources,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    files: dict[Path, str] = {}
    for sub in GENERATED_SUBDIRS:
        for path in sorted((out_dir / sub).iterdir()):
            text = _IMPORT.sub(lambda m: f"from {OUTPUT_PACKAGE}.{m.group(1)} import ", path.read_text())
            files[sub / path.name] = text
    for package in (Path("runwick"), *GENERATED_SUBDIRS):
        files[package / "__init__.py"] = ""
    return files


def stale_files() -> list[str]:
    """Names the generated files that differ from what protoc produces now."""
    with tempfile.TemporaryDirectory() as tmp:
        expected = generate_into(Path(tmp))
    stale = [str(rel) for rel, text in expected.items() if _read(OUTPUT_DIR / rel) != text]
    generated = [p for sub in GENERATED_SUBDIRS for p in (OUTPUT_DIR / sub).glob("*.py*")]
    present = {p.relative_to(OUTPUT_DIR) for p in generated}
    stale += [str(rel) for rel in present - set(expected)]
    return sorted(stale)


def _read(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the committed code is stale")
    options = parser.parse_args()
    if options.check:
        stale = stale_files()
        for name in stale:
            print(f"stale: worker_sdk/proto/{name}", file=sys.stderr)
        return 1 if stale else 0
    with tempfile.TemporaryDirectory() as tmp:
        files = generate_into(Path(tmp))
    for sub in GENERATED_SUBDIRS:
        for old in (OUTPUT_DIR / sub).glob("*_pb2*"):
            old.unlink()
    for rel, text in files.items():
        (OUTPUT_DIR / rel).parent.mkdir(parents=True, exist_ok=True)
        (OUTPUT_DIR / rel).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
