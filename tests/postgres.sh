# PostgreSQL for the test suite, sourced by tests/run.sh: `ensure_postgres` makes sure
# RUNWICK_TEST_PG_ADMIN_URL names a server the tests can use, without changing the
# system's PostgreSQL configuration:
#
# 1. RUNWICK_TEST_PG_ADMIN_URL already set: that server.
# 2. A server answers on 127.0.0.1:5432 (RUNWICK_TEST_PG_PORT): that one, as user
#    postgres with trust auth on loopback (the tests' default URL).
# 3. Otherwise a throwaway cluster from the installed server programs, in a temporary
#    directory on a free port (tests/support/pg_cluster.py), stopped and removed when the
#    calling shell exits. Debian's postgresql package is installed first if no server
#    programs are found (that needs root).

pg_answers() {
  "$PYTHON_FOR_TESTS" - "$1" <<'PY'
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2).close()
except OSError:
    sys.exit(1)
PY
}

pg_server_programs() {
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null
}

ensure_postgres() {
  PYTHON_FOR_TESTS=${PYTHON_FOR_TESTS:-.venv/bin/python}
  [ -n "${RUNWICK_TEST_PG_ADMIN_URL:-}" ] && return 0
  pg_answers "${RUNWICK_TEST_PG_PORT:-5432}" && return 0
  if ! pg_server_programs; then
    echo "PostgreSQL is not installed: installing Debian's postgresql package" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  fi
  RUNWICK_TEST_PG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/runwick-test-pg.XXXXXX")
  trap 'stop_throwaway_postgres' EXIT
  RUNWICK_TEST_PG_ADMIN_URL=$("$PYTHON_FOR_TESTS" -m tests.support.pg_cluster start "$RUNWICK_TEST_PG_DIR")
  export RUNWICK_TEST_PG_ADMIN_URL RUNWICK_TEST_PG_DIR
  echo "no PostgreSQL on 127.0.0.1:${RUNWICK_TEST_PG_PORT:-5432}: using a throwaway cluster at $RUNWICK_TEST_PG_ADMIN_URL" >&2
}

stop_throwaway_postgres() {
  if [ -n "${RUNWICK_TEST_PG_DIR:-}" ]; then
    "$PYTHON_FOR_TESTS" -m tests.support.pg_cluster stop "$RUNWICK_TEST_PG_DIR" || true
  fi
}
