#!/usr/bin/env bash
# Installs the test dependencies into ./.venv, makes sure PostgreSQL is reachable, and
# runs the whole suite (SQLite, PostgreSQL and process tests). Extra arguments go to pytest.
#
# PostgreSQL: set RUNWICK_TEST_PG_ADMIN_URL to use a server of your own; otherwise the
# local server on 127.0.0.1:5432 is used, started here if it is down, and installed
# from Debian's packages (apt-get install postgresql) if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev]"

pg_up() {
  .venv/bin/python - <<'PY'
import socket, sys
try:
    socket.create_connection(("127.0.0.1", 5432), timeout=2).close()
except OSError:
    sys.exit(1)
PY
}

if [ -z "${RUNWICK_TEST_PG_ADMIN_URL:-}" ] && ! pg_up; then
  if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    echo "PostgreSQL is not installed: installing Debian's postgresql package" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  if [ -z "$version" ]; then
    echo "no PostgreSQL cluster found under /etc/postgresql" >&2
    exit 1
  fi
  # Trust auth on loopback, as the tests connect as user postgres without a password.
  hba=/etc/postgresql/$version/main/pg_hba.conf
  grep -q "^host all all 127.0.0.1/32 trust" "$hba" || sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start
  for _ in $(seq 1 30); do pg_up && break; sleep 1; done
fi

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

exec .venv/bin/python -m pytest "$@"
