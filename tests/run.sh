#!/usr/bin/env bash
# Installs the test dependencies into ./.venv, makes sure PostgreSQL is reachable, and
# runs the whole suite (SQLite, PostgreSQL and process tests). Extra arguments go to pytest.
#
# PostgreSQL: set RUNWICK_TEST_PG_ADMIN_URL to use a server of your own; otherwise the
# server on 127.0.0.1:5432 is used if one answers, else a throwaway cluster in a temporary
# directory (tests/postgres.sh). The system's PostgreSQL configuration is never changed.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
# Both distributions, editable, in one command: the SDK with the dev extra (the root) and
# runwick-coordinator (packaging/coordinator), which the dev extra names and no index has.
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev]" -e ./packaging/coordinator

# Node.js tools, pinned by committed lock files into project-local node_modules/:
# buf (protos/: `buf lint` of the wire contract) and the Node.js worker example
# (examples/node-worker: grpc-js, proto-loader). Debian's nodejs and npm where missing.
if ! { command -v node && command -v npm; } >/dev/null; then
  echo "installing Debian packages: nodejs npm" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
for node_project in protos examples/node-worker; do
  npm ci --prefix "$node_project" --no-audit --no-fund --loglevel=error
done

# shellcheck source=tests/postgres.sh
. tests/postgres.sh
ensure_postgres

# Observability and deploy tests run a real Prometheus and promtool (Debian's prometheus
# package) and render manifests with kubectl (Debian's kubernetes-client where missing).
# They fail, never skip, without them. Our Prometheus runs on its own port; a system
# service the package may start is never used.
missing=()
{ command -v prometheus && command -v promtool; } >/dev/null || missing+=(prometheus)
command -v kubectl >/dev/null || missing+=(kubernetes-client)
# The dashboard's browser tests (tests/browser) drive Debian's Chromium through Playwright,
# which never downloads a browser of its own here.
[ -x /usr/bin/chromium ] || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The layers are a contract (pyproject.toml [tool.importlinter]): a broken one fails the run.
.venv/bin/lint-imports --no-cache

# Runwick as users install it: both distributions' sdists and wheels built, the SDK's
# wheel installed alone into a fresh virtualenv and checked there (its size held to
# 25 MiB and printed), then the coordinator's; the image's build stage rehearsed.
bash tests/wheel_smoke.sh

# Two pytest-xdist processes by default (RUNWICK_TEST_WORKERS; `-n 0` in the arguments
# runs in this one). Every test makes its own databases, ports and directories, and each
# process its own PostgreSQL database, so the processes share nothing.
# Not exec: the throwaway cluster, if any, is stopped when this shell exits.
status=0
.venv/bin/python -m pytest -n "${RUNWICK_TEST_WORKERS:-2}" "$@" || status=$?
exit "$status"
