#!/usr/bin/env bash
# A throwaway PostgreSQL server for the store's tests and the two-process serve test.
#   scripts/pg.sh start   install (Debian package) if missing, initdb, start; prints the URL on stdout
#   scripts/pg.sh stop    stop it and remove its data directory
#   scripts/pg.sh url     print the URL
# Settings: MASLENS_PG_DIR (data directory, default /tmp/maslens-pg-$UID), MASLENS_PG_PORT (55432).
# Loopback only, trust authentication, fsync off: a test server, never a deployment (see docs/serve.md).
set -euo pipefail
dir="${MASLENS_PG_DIR:-/tmp/maslens-pg-$(id -u)}"
port="${MASLENS_PG_PORT:-55432}"
url="postgres://maslens@127.0.0.1:${port}/postgres"

bin_dir() {
  local b
  b=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
  if [ -z "$b" ] || [ ! -x "$b/postgres" ]; then
    echo "pg.sh: installing postgresql (Debian package)" >&2
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
    b=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  fi
  echo "$b"
}

# PostgreSQL refuses to run as root: run its programs as the `postgres` user then.
as_pg() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

case "${1:-}" in
  start)
    b=$(bin_dir)
    if as_pg "$b/pg_ctl" -D "$dir" status >/dev/null 2>&1; then
      echo "$url"
      exit 0
    fi
    rm -rf "$dir"
    mkdir -p "$dir"
    [ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
    as_pg "$b/initdb" -D "$dir" -U maslens -A trust --no-sync >/dev/null
    as_pg "$b/pg_ctl" -D "$dir" -l "$dir/server.log" -w -t 60 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start >/dev/null
    echo "$url"
    ;;
  stop)
    b=$(bin_dir)
    as_pg "$b/pg_ctl" -D "$dir" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$dir"
    ;;
  url)
    echo "$url"
    ;;
  *)
    echo "usage: scripts/pg.sh start|stop|url" >&2
    exit 2
    ;;
esac
