#!/usr/bin/env bash
# The secrets of compose.yaml, made once. Each variable missing from the env file (default:
# .env beside compose.yaml, which `docker compose` reads) is added with a random value; values
# already there are kept, so running it again changes nothing. The file is made readable by its
# owner only. Usage: bash deploy/compose-env.sh [FILE]
set -euo pipefail

file=${1:-"$(dirname "$0")/../.env"}
touch "$file"
chmod 600 "$file"

# BYTES random bytes as hex: letters and digits only, safe inside a URL (MinIO takes 8 to 40
# characters for a secret key)
random() { od -An -vN"$1" -tx1 /dev/urandom | tr -d ' \n'; }

# NAME=VALUE appended unless NAME is already in the file
add() {
  if ! grep -q "^$1=" "$file"; then
    printf '%s=%s\n' "$1" "$2" >>"$file"
    echo "compose-env: $1 added to $file"
  fi
}

# PostgreSQL: the superuser (postgis, db-setup) and mapsvc's own role (db-setup, the app)
add POSTGRES_PASSWORD "$(random 24)"
add MAPSVC_DB_PASSWORD "$(random 24)"
# Redis: every client
add MAPSVC_REDIS_PASSWORD "$(random 24)"
# MinIO: the root user (minio, buckets) and mapsvc's own user, made by the buckets job
add MINIO_ROOT_USER minio-root
add MINIO_ROOT_PASSWORD "$(random 20)"
add MAPSVC_S3_ACCESS_KEY_ID mapsvc
add MAPSVC_S3_SECRET_ACCESS_KEY "$(random 20)"
# the keys that sign access tokens (api, convert), the Convert token, Flower's login
add MAPSVC_JWT_SECRETS "k1:$(random 32)"
add MAPSVC_CONVERT_TOKEN "$(random 24)"
add MAPSVC_FLOWER_BASIC_AUTH "flower:$(random 16)"
