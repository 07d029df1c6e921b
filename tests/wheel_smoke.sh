#!/usr/bin/env bash
# The package as users install it: builds the sdist and the wheel, installs the wheel
# with no extras into a fresh virtualenv, and checks what a service embedding the SDK
# gets there: the SDK imports, `runwick --version` answers, and `runwick serve` refuses
# with the install line to use. Prints the install's size. Run by tests/run.sh (it
# downloads the SDK's dependencies from the package index, so it is not a pytest test).
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/runwick-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT

# `python -m build` in a virtualenv of its own (the dev one pins an older `packaging` for
# checkov), each build in an isolated env with pyproject's own build requirements.
"$python" -m venv "$work/build"
"$work/build/bin/python" -m pip install --quiet --disable-pip-version-check build >"$work/pip.log" 2>&1 \
  || { cat "$work/pip.log" >&2; exit 1; }
build_log="$work/build.log"
"$work/build/bin/python" -m build --outdir "$work/dist" . >"$build_log" 2>&1 || { cat "$build_log" >&2; exit 1; }
if grep -qi "deprecat" "$build_log"; then  # e.g. the old license table, refused from 2027-02-18
  echo "wheel smoke: the build warns of something deprecated:" >&2
  cat "$build_log" >&2
  exit 1
fi
ls "$work"/dist/runwick-*.tar.gz >/dev/null

"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$work"/dist/runwick-*.whl \
  >"$work/install.log" 2>&1 || { cat "$work/install.log" >&2; exit 1; }
"$work/venv/bin/python" -c "from worker_sdk import AsyncClient, Client, Worker, job; print('sdk imports')"
"$work/venv/bin/runwick" --version
status=0
refusal=$("$work/venv/bin/runwick" serve 2>&1) || status=$?
if [ "$status" -ne 2 ] || ! grep -q 'pip install "runwick\[coordinator\]"' <<<"$refusal" || grep -q Traceback <<<"$refusal"; then
  echo "wheel smoke: 'runwick serve' without the coordinator extra should exit 2 with the install line; got $status:" >&2
  echo "$refusal" >&2
  exit 1
fi
# What the SDK brought, without the virtualenv's own pip and setuptools.
size=$(du -sm --exclude='pip' --exclude='pip-*' --exclude='setuptools*' --exclude='_distutils_hack' \
  "$work"/venv/lib/python3*/site-packages | cut -f1)
echo "wheel smoke: sdist and wheel built; the SDK install (no extras) is ${size} MB; serve refuses with the install line"
