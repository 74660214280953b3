#!/usr/bin/env bash
# A throwaway PostgreSQL server on a Unix socket, for `sawtooth bench
# --engine --db URL` and for trying a fleet on one machine:
#
#   url=$(scripts/pgserver.sh start /tmp/pg)       # durable: fsync, synchronous_commit, full_page_writes on
#   url=$(scripts/pgserver.sh start /tmp/pg fast)  # fsync off, as the tests' servers (not durable)
#   go run . bench --engine --db "$url"
#   scripts/pgserver.sh stop /tmp/pg               # stops it and removes DIR
#
# DIR must not exist yet (start creates it; stop deletes it). The server
# listens on DIR/.s.PGSQL.5432 only (no TCP), trusts local connections
# as the user postgres, and keeps its log in DIR/server.log. PostgreSQL
# refuses to run as root, so under root it runs as the postgres user.
# Debian keeps initdb and postgres under /usr/lib/postgresql/*/bin.
set -euo pipefail

usage() { echo "usage: $0 start DIR [fast] | stop DIR" >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1 dir=$2 mode=${3:-durable}

bindir() {
  if command -v initdb >/dev/null 2>&1; then dirname "$(readlink -f "$(command -v initdb)")"; return; fi
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -n "$d" ] && [ -x "$d/initdb" ] || { echo "no initdb found: install the postgresql package" >&2; exit 1; }
  echo "$d"
}

as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case $cmd in
start)
  [ ! -e "$dir" ] || { echo "$dir exists: give a new directory (stop removes it)" >&2; exit 1; }
  case $mode in
  durable) settings=() ;;
  fast) settings=(-c fsync=off -c synchronous_commit=off -c full_page_writes=off) ;;
  *) usage ;;
  esac
  bin=$(bindir)
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  [ "$(id -u)" != 0 ] || chown postgres: "$dir"
  as_owner "$bin/initdb" -A trust -U postgres -E UTF8 --locale=C -D "$dir/data" >"$dir/initdb.log"
  as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
    -o "-k $dir -h '' -c max_connections=200 ${settings[*]}" start >/dev/null
  echo "postgres:///postgres?host=$dir&user=postgres&sslmode=disable"
  ;;
stop)
  [ -d "$dir/data" ] || { echo "no server data in $dir" >&2; exit 1; }
  as_owner "$(bindir)/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
  rm -rf "$dir"
  ;;
*) usage ;;
esac
