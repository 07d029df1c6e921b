#!/usr/bin/env bash
# Runwick as users install it. This repository builds two distributions: `runwick`, the
# SDK a service embeds (the root pyproject.toml), and `runwick-coordinator`, the
# coordinator and the `runwick` command (packaging/coordinator/). This script:
#  1. builds both sdists and wheels (`python -m build`, each wheel from its sdist);
#  2. installs the SDK wheel alone into a fresh virtualenv, as a service would, and
#     checks what it got: at most 25 MiB (printed), no `coordinator` package, no rich or
#     SQLAlchemy, a Client that calls and fails cleanly; it prints `import worker_sdk`'s time;
#  3. adds the coordinator wheel there: `runwick --version`, every coordinator module
#     imports, and `runwick migrate` creates a SQLite database (the migrations shipped);
#  4. rehearses the container image's build stage (tests/image_build_rehearsal.py).
# Run by tests/run.sh. It downloads dependencies from the package index, so it is not a
# pytest test.
set -euo pipefail
cd "$(dirname "$0")/.."
# The installs alone must serve: nothing of this checkout on the path (and `python -I`
# below, which leaves out the current directory too).
unset PYTHONPATH

python=${PYTHON:-python3}
sdk_limit_mib=25
work=$(mktemp -d "${TMPDIR:-/tmp}/runwick-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "wheel smoke: $*" >&2; exit 1; }
quiet() {  # runs "$@", showing its output only when it fails
  "$@" >"$work/step.log" 2>&1 || { cat "$work/step.log" >&2; fail "failed: $*"; }
}

# 1. `python -m build` in a virtualenv of its own (the dev one pins an older `packaging`
# for checkov), each build in an isolated env with its pyproject's build requirements.
"$python" -m venv "$work/build"
quiet "$work/build/bin/python" -m pip install --quiet --disable-pip-version-check build
for project in . packaging/coordinator; do
  build_log="$work/build-$(basename "$(realpath "$project")").log"
  "$work/build/bin/python" -m build --outdir "$work/dist" "$project" >"$build_log" 2>&1 \
    || { cat "$build_log" >&2; fail "building $project failed"; }
  if grep -qi "deprecat" "$build_log"; then  # e.g. the old license table, refused from 2027-02-18
    cat "$build_log" >&2
    fail "building $project warns of something deprecated"
  fi
done
sdk_wheel=$(echo "$work"/dist/runwick-*-py3-none-any.whl)
coordinator_wheel=$(echo "$work"/dist/runwick_coordinator-*-py3-none-any.whl)
ls "$work"/dist/runwick-*.tar.gz "$work"/dist/runwick_coordinator-*.tar.gz "$sdk_wheel" "$coordinator_wheel" >/dev/null

# 2. The SDK alone. The virtualenv has no pip of its own (the build env's pip installs
# into it), so its site-packages holds exactly what the SDK brought.
venv="$work/venv"
"$python" -m venv --without-pip "$venv"
pip_into_venv=("$work/build/bin/python" -m pip --disable-pip-version-check --python "$venv/bin/python")
quiet "${pip_into_venv[@]}" install "$sdk_wheel"
site_packages=$(echo "$venv"/lib/python3*/site-packages)
# The files' sizes (what the wheels unpack to, with the bytecode pip compiles), which do
# not depend on the filesystem; `du` adds each file's last partial block on top.
sdk_bytes=$(find "$site_packages" -type f -printf '%s\n' | awk '{n += $1} END {print n}')
sdk_mib=$(awk -v b="$sdk_bytes" 'BEGIN {printf "%.1f", b / 1048576}')
disk_mib=$(du -sk "$site_packages" | awk '{printf "%.1f", $1 / 1024}')
if [ "$sdk_bytes" -gt $((sdk_limit_mib * 1048576)) ]; then
  du -sk "$site_packages"/* | sort -rn | head -15 >&2
  fail "the SDK install is ${sdk_mib} MiB, over its ${sdk_limit_mib} MiB budget (the largest parts above)"
fi
"$venv/bin/python" -I - <<'EOF'
import importlib.util, sys
from datetime import timedelta
from uuid import uuid4

from worker_sdk import AsyncClient, Client, RunwickError, Worker, job  # noqa: F401

for absent in ("coordinator", "rich", "sqlalchemy", "alembic", "argcomplete", "psycopg"):
    if importlib.util.find_spec(absent) is not None:
        sys.exit(f"wheel smoke: the SDK install has {absent!r}, which is not the SDK's")
# A Client is built and its call fails as the SDK says (nothing listens on port 1).
with Client("127.0.0.1:1", token="rwk_smoke", rpc_timeout=timedelta(seconds=10)) as client:
    try:
        client.get(str(uuid4()))
    except RunwickError as exc:
        print(f"sdk imports; a Client's call to nowhere raised {type(exc).__name__}")
    else:
        sys.exit("wheel smoke: a call to a port nobody listens on returned")
EOF
# Each a fresh process, as a service's first import. The fastest of five: the others
# measure this machine's other work too. Printed only (timings are not tests here).
import_ms=$(for _ in 1 2 3 4 5; do
  "$venv/bin/python" -I -c 'import time; t = time.perf_counter(); import worker_sdk; print(round((time.perf_counter() - t) * 1000))'
done | sort -n | head -1)

# 3. The coordinator beside it (both wheels named, so pip looks for neither on an index).
quiet "${pip_into_venv[@]}" install "$sdk_wheel" "$coordinator_wheel"
"$venv/bin/runwick" --version
"$venv/bin/python" -I - <<'EOF'
import importlib, pkgutil

import coordinator

# Every module, so a dependency the code needs but runwick-coordinator does not declare
# fails here and not in a user's install.
# (`__main__` modules run the command instead.)
modules = pkgutil.walk_packages(coordinator.__path__, "coordinator.")
names = [m.name for m in modules if not m.name.endswith(".__main__")]
for name in names:
    importlib.import_module(name)
print(f"coordinator: {len(names)} modules import")
EOF
migrated=$("$venv/bin/runwick" migrate --database-url "sqlite:///$work/smoke.db" 2>&1)
grep -q "created the database schema" <<<"$migrated" || fail "runwick migrate said: $migrated"

# 4. The container image's build stage: the hashed lock, then both distributions from the
# files the Dockerfile copies, as it installs them.
quiet "$python" tests/image_build_rehearsal.py "$work/image" "$work/image-venv"
image_version=$("$work/image-venv/bin/runwick" --version)
migrated=$("$work/image-venv/bin/runwick" migrate --database-url "sqlite:///$work/image.db" 2>&1)
grep -q "created the database schema" <<<"$migrated" || fail "runwick migrate in the rehearsed image said: $migrated"

echo "wheel smoke: both sdists and wheels built; the SDK install (runwick alone) is ${sdk_mib} MiB" \
  "(${disk_mib} MiB of disk blocks here; budget ${sdk_limit_mib} MiB); import worker_sdk takes ${import_ms} ms (fastest of 5; target 200 ms, prometheus_client and OpenTelemetry load later);" \
  "with runwick-coordinator: every module imports and migrate works; the image's build stage installs ($image_version)"
