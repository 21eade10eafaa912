#!/usr/bin/env bash
# Build the web pages (api/web: the viewer and the API docs) into api/web/dist, when needed.
#   deploy/web.sh   (make web; make setup runs it)
# `npm ci` runs when package-lock.json changed since the last install; the build when the
# lockfile, package.json, build.mjs or a file of src/ changed since the last build. Each stamp
# holds what it was made from: node_modules/.mapsvc-lock a copy of the lockfile, dist/.stamp
# the hash of the inputs. Quick when all is there. npm and node come from Debian (nodejs, npm).
set -euo pipefail

WEB=$(cd "$(dirname "$0")/../api/web" && pwd)
say() { printf 'web: %s\n' "$*"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
  say "need root to run: $*"; exit 1; fi; }

inputs_hash() {
  (cd "$WEB" && find package.json package-lock.json build.mjs src -type f -print0 | sort -z |
    xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
}

HASH=$(inputs_hash)
if [ -f "$WEB/dist/.stamp" ] && [ "$(cat "$WEB/dist/.stamp")" = "$HASH" ] &&
  cmp -s "$WEB/package-lock.json" "$WEB/node_modules/.mapsvc-lock"; then
  say "api/web/dist is up to date"
  exit 0
fi

if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  say "installing nodejs and npm"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    nodejs npm >/dev/null
fi
if ! cmp -s "$WEB/package-lock.json" "$WEB/node_modules/.mapsvc-lock"; then
  say "installing the npm packages of api/web (npm ci)"
  (cd "$WEB" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  cp "$WEB/package-lock.json" "$WEB/node_modules/.mapsvc-lock"
fi
(cd "$WEB" && node build.mjs)
echo "$HASH" >"$WEB/dist/.stamp"
