#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for relay-pg's tests (and measurements), run as an unprivileged
# user, listening on 127.0.0.1 and a Unix socket inside DIR on a free port.
#
#   eval "$(relay-pg/scripts/pg-test-cluster.sh start DIR)"   # exports RELAY_TEST_POSTGRES_URL
#   cargo test -p relay-pg
#   relay-pg/scripts/pg-test-cluster.sh stop DIR               # stops it and removes DIR
#
# DIR must not exist or be empty. Installs Debian's `postgresql` package with apt-get when no
# server is found and we are root. As root, the server runs as the package's `postgres` user
# (initdb refuses root). The cluster has password (SCRAM) authentication on TCP with a random
# password in the URL, and fsync off unless PG_TEST_DURABLE=1 (it is thrown away anyway).
# Everything but the final `export` line goes to stderr.
set -euo pipefail

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
cmd=$1
dir=$2

bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

# A free TCP port on 127.0.0.1 (the kernel's choice; without python3, a random unused one).
free_port() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
    return
  fi
  local port
  while :; do
    port=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
}

as_owner() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u "$owner" -- "$@"
  else
    "$@"
  fi
}

case $cmd in
start)
  bin=$(bindir)
  if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    if [ "$(id -u)" != 0 ]; then
      echo "PostgreSQL server binaries not found under /usr/lib/postgresql; install Debian's postgresql package" >&2
      exit 1
    fi
    echo "installing PostgreSQL from Debian's packages" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >&2
    bin=$(bindir)
  fi
  owner=$(id -un)
  if [ "$(id -u)" = 0 ]; then
    owner=postgres
    if ! id "$owner" >/dev/null 2>&1; then
      useradd --system --user-group --no-create-home --shell /usr/sbin/nologin "$owner"
    fi
  fi
  mkdir -p "$dir"
  chmod 700 "$dir"
  [ "$(id -u)" = 0 ] && chown "$owner:" "$dir"
  port=$(free_port)
  password=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  as_owner sh -c "umask 077; printf '%s\n' '$password' > '$dir/pwfile'"
  as_owner "$bin/initdb" -D "$dir/data" -U relay_test --pwfile="$dir/pwfile" \
    --auth-local=trust --auth-host=scram-sha-256 -E UTF8 --locale=C --no-sync >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
  rm -f "$dir/pwfile"
  fsync=off
  [ "${PG_TEST_DURABLE:-0}" = 1 ] && fsync=on
  as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=$fsync -c synchronous_commit=$fsync -c full_page_writes=$fsync -c max_connections=200" \
    start >&2 || { cat "$dir/server.log" >&2; exit 1; }
  echo "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port (fsync=$fsync), data in $dir" >&2
  echo "export RELAY_TEST_POSTGRES_URL='postgresql://relay_test:$password@127.0.0.1:$port/postgres'"
  ;;
stop)
  [ -d "$dir/data" ] || exit 0
  bin=$(bindir)
  owner=$(stat -c %U "$dir/data")
  as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >&2 || true
  rm -rf "$dir"
  ;;
*) usage ;;
esac
