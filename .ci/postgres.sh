# shellcheck shell=bash
# PostgreSQL for the test step, sourced by .ci/run (and testable on its own:
#   bash -c 'source .ci/postgres.sh; SNERD_CI_PG_PORT=1 ensure_postgres; env | grep PG_URL').
#
# ensure_postgres: if a server answers on 127.0.0.1:${SNERD_CI_PG_PORT:-5432} with a `test`
# database (trust auth, user postgres), use it; else install Debian's `postgresql` (apt)
# if its binaries are missing, and start a throwaway cluster as the `postgres` user on a
# free loopback port with trust auth and a `test` database. Either way it exports
# SNERD_TEST_PG_URL, which the tests read (tests/pgkit.py). stop_postgres stops a cluster
# that ensure_postgres started (nothing otherwise).

snerd_pg_dir=""
snerd_pg_bin=""

pg_answers() { # PORT: a server accepts connections to database `test` as postgres
  local port="$1"
  if command -v pg_isready >/dev/null 2>&1; then
    pg_isready -q -h 127.0.0.1 -p "$port" -d test -U postgres || return 1
  fi
  command -v psql >/dev/null 2>&1 &&
    PGCONNECT_TIMEOUT=3 psql -h 127.0.0.1 -p "$port" -U postgres -d test -qAtc 'select 1' \
      >/dev/null 2>&1
}

as_postgres() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    sudo -u postgres "$@"
  fi
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

ensure_postgres() {
  local port="${SNERD_CI_PG_PORT:-5432}"
  if pg_answers "$port"; then
    export SNERD_TEST_PG_URL="postgresql://postgres@127.0.0.1:${port}/test"
    echo "PostgreSQL answers on 127.0.0.1:${port}: ${SNERD_TEST_PG_URL}"
    return 0
  fi
  echo "no PostgreSQL with a test database on 127.0.0.1:${port}; starting one"
  if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
    apt_install postgresql
  fi
  snerd_pg_bin="$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
  id postgres >/dev/null 2>&1 || as_root useradd --system --home-dir /var/lib/postgresql postgres
  port="$(free_port)"
  snerd_pg_dir="$(mktemp -d /tmp/snerd-ci-pg.XXXXXX)"
  chown postgres "$snerd_pg_dir" 2>/dev/null || as_root chown postgres "$snerd_pg_dir"
  as_postgres "$snerd_pg_bin/initdb" -D "$snerd_pg_dir/data" -U postgres --auth=trust \
    -E UTF8 >"$snerd_pg_dir/initdb.log" || { cat "$snerd_pg_dir/initdb.log"; return 1; }
  as_postgres "$snerd_pg_bin/pg_ctl" -D "$snerd_pg_dir/data" -l "$snerd_pg_dir/server.log" -w \
    -o "-c listen_addresses=127.0.0.1 -p ${port} -k ${snerd_pg_dir}" start ||
    { cat "$snerd_pg_dir/server.log"; return 1; }
  as_postgres "$snerd_pg_bin/createdb" -h 127.0.0.1 -p "$port" -U postgres test
  pg_answers "$port" || return 1
  export SNERD_TEST_PG_URL="postgresql://postgres@127.0.0.1:${port}/test"
  echo "started PostgreSQL ($("$snerd_pg_bin/postgres" --version)) at ${SNERD_TEST_PG_URL}"
}

stop_postgres() {
  if [ -n "$snerd_pg_dir" ] && [ -d "$snerd_pg_dir/data" ]; then
    as_postgres "$snerd_pg_bin/pg_ctl" -D "$snerd_pg_dir/data" -m fast -w stop >/dev/null || true
    rm -rf "$snerd_pg_dir"
    snerd_pg_dir=""
  fi
}
