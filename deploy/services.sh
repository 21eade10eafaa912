#!/usr/bin/env bash
# Make sure the local services mapsvc needs are installed and running: Redis, PostgreSQL with
# PostGIS, and the service database with the postgis extension. Idempotent and quick when all is
# there. Services on another host (per MAPSVC_REDIS_URL / MAPSVC_DATABASE_URL) are left alone.
#   deploy/services.sh [--test-tools]   (--test-tools also installs gdal-bin, used by the tests,
#   wrk, used by `make stress`, mapserver-bin and spawn-fcgi, MapServer as FastCGI for
#   `make bench` (tests/bench/bench_wms.py), and for the browser test (tests/browser) chromium,
#   nodejs and npm, and its npm packages, `npm ci` there)
set -euo pipefail

DB_URL=${MAPSVC_DATABASE_URL:-postgresql+psycopg://postgres@127.0.0.1:5432/mapsvc}
REDIS_URL=${MAPSVC_REDIS_URL:-redis://127.0.0.1:6379/0}
# A password in the Redis URL (redis://[user]:password@host:port/db) never goes on a command
# line (ps shows them): redis-cli gets the URL without it and the password, percent-decoded,
# in REDISCLI_AUTH; messages show the URL without it
REDIS_CLI=(redis-cli -u "$REDIS_URL")
REDIS_SHOWN=$REDIS_URL
if [[ $REDIS_URL =~ ^(rediss?://)([^:@/]*):([^@/]*)@(.*)$ ]]; then
  REDIS_CLI=(redis-cli -u "${BASH_REMATCH[1]}${BASH_REMATCH[4]}")
  [ -n "${BASH_REMATCH[2]}" ] && REDIS_CLI+=(--user "${BASH_REMATCH[2]}")
  REDIS_SHOWN="${BASH_REMATCH[1]}${BASH_REMATCH[2]}:***@${BASH_REMATCH[4]}"
  REDISCLI_AUTH=$(printf '%b' "${BASH_REMATCH[3]//%/\\x}")
  export REDISCLI_AUTH
fi
# PONG, not just an answer: redis-cli exits 0 on a refused password too
redis_up() { [ "$("${REDIS_CLI[@]}" ping 2>/dev/null)" = PONG ]; }
PG_URL=${DB_URL/+psycopg/}
DB_NAME=${PG_URL##*/}
DB_NAME=${DB_NAME%%\?*}
SERVER_URL=${PG_URL%/*}/postgres

say() { printf 'services: %s\n' "$*"; }
is_local() { [[ $1 =~ @?(127\.0\.0\.1|localhost|\[::1\])(:|/|$) ]]; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
  say "need root to run: $*"; exit 1; fi; }

missing=()
want() { dpkg -s "$1" >/dev/null 2>&1 || missing+=("$1"); }

if is_local "$REDIS_URL"; then command -v redis-server >/dev/null || want redis-server; fi
if is_local "$PG_URL"; then
  if command -v pg_lsclusters >/dev/null && [ -n "$(ls /etc/postgresql 2>/dev/null)" ]; then
    PG_VERSION=$(ls /etc/postgresql | sort -n | tail -1)
    want "postgresql-$PG_VERSION-postgis-3"
  else
    want postgresql
    want postgresql-postgis
  fi
fi
# nginx: the front `make run` puts before the API, serving cached tiles straight from disk
command -v nginx >/dev/null || want nginx-light
[ "${1:-}" = "--test-tools" ] && want gdal-bin && want wrk && want mapserver-bin && want spawn-fcgi
if [ "${1:-}" = "--test-tools" ]; then
  command -v chromium >/dev/null || want chromium
  command -v node >/dev/null || want nodejs
  command -v npm >/dev/null || want npm
fi
command -v psql >/dev/null || want postgresql-client
command -v redis-cli >/dev/null || want redis-tools

if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

# MapLibre GL JS for the browser test, as package-lock.json has it; again only when that changed
BROWSER_TESTS=$(dirname "$0")/../tests/browser
if [ "${1:-}" = "--test-tools" ] && [ -f "$BROWSER_TESTS/package-lock.json" ] &&
  ! cmp -s "$BROWSER_TESTS/package-lock.json" "$BROWSER_TESTS/node_modules/.services-sh-lock"; then
  say "installing the npm packages of tests/browser"
  (cd "$BROWSER_TESTS" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  cp "$BROWSER_TESTS/package-lock.json" "$BROWSER_TESTS/node_modules/.services-sh-lock"
fi

if is_local "$REDIS_URL" && ! redis_up; then
  say "starting Redis"
  as_root mkdir -p /var/lib/redis /var/log/redis
  # AOF, fsynced every second: a restart of Redis keeps the queued jobs and their records
  # (at most the last second of writes is lost); the folder holds the AOF. The URL's
  # password, if any, is the server's requirepass, given on its standard input (`-`)
  printf '%s\n' ${REDISCLI_AUTH:+"requirepass \"$REDISCLI_AUTH\""} |
    as_root redis-server - --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" \
    --appendonly yes --appendfsync everysec --maxmemory-policy noeviction --dir /var/lib/redis \
    --logfile /var/log/redis/mapsvc.log
  for _ in $(seq 50); do redis_up && break; sleep 0.1; done
fi
redis_up || { say "Redis at $REDIS_SHOWN does not answer PING (down, or the password is wrong)"
  exit 1; }
# Redis holds the broker's queues and the job records: it must never evict a key to make room
# (the caches keep to their own byte budgets, MAPSVC_*_CACHE_MAX_BYTES)
POLICY=$("${REDIS_CLI[@]}" info memory | sed -n 's/^maxmemory_policy:\(.*\)\r$/\1/p')
[ "$POLICY" = noeviction ] || { say "Redis at $REDIS_SHOWN has maxmemory-policy $POLICY;"\
" mapsvc needs noeviction (redis-cli config set maxmemory-policy noeviction)"; exit 1; }
# A Redis this script did not start keeps its own durability: turning AOF on is its owner's
# call (it rewrites the whole data set, and CONFIG SET lasts only until a restart)
if [ "$("${REDIS_CLI[@]}" config get appendonly | tail -1)" != yes ]; then
  say "note: Redis at $REDIS_SHOWN runs without AOF: a restart of it loses queued jobs and their"\
" records (to keep them: start it with --appendonly yes, or redis-cli config set appendonly yes)"
fi

if is_local "$PG_URL" && ! psql "$SERVER_URL" -tAc 'select 1' >/dev/null 2>&1; then
  PG_VERSION=$(ls /etc/postgresql | sort -n | tail -1)
  say "starting PostgreSQL $PG_VERSION"
  as_root pg_ctlcluster --skip-systemctl-redirect "$PG_VERSION" main start || true
  for _ in $(seq 100); do psql "$SERVER_URL" -tAc 'select 1' >/dev/null 2>&1 && break; sleep 0.2; done
fi
psql "$SERVER_URL" -tAc 'select 1' >/dev/null || { say "PostgreSQL at $SERVER_URL does not answer"; exit 1; }

if [ "$(psql "$SERVER_URL" -tAc "select 1 from pg_database where datname = '$DB_NAME'")" != 1 ]; then
  say "creating database $DB_NAME"
  psql "$SERVER_URL" -qc "CREATE DATABASE \"$DB_NAME\""
fi
psql "$PG_URL" -qtAc 'CREATE EXTENSION IF NOT EXISTS postgis' >/dev/null
say "Redis $("${REDIS_CLI[@]}" info server | sed -n 's/^redis_version:\(.*\)\r$/\1/p'),"\
" PostgreSQL $DB_NAME with PostGIS $(psql "$PG_URL" -tAc 'select postgis_lib_version()')"
