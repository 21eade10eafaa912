#!/bin/sh
# The buckets and mapsvc's own MinIO user, made with the root credentials by the `buckets`
# service of compose.yaml on every `docker compose up` (each step can run again). The user
# (MAPSVC_S3_ACCESS_KEY_ID / MAPSVC_S3_SECRET_ACCESS_KEY) may list, read, write and delete
# objects of the two buckets and nothing else: it makes no bucket, and has no admin rights.
# Environment: MINIO_ROOT_USER, MINIO_ROOT_PASSWORD, the two keys, MAPSVC_RASTER_S3_BUCKET,
# MAPSVC_S3_BUCKET.
set -eu
mc alias set local http://minio:9000 "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD" >/dev/null
mc mb --ignore-existing "local/$MAPSVC_RASTER_S3_BUCKET" "local/$MAPSVC_S3_BUCKET"

policy=$(mktemp)
cat >"$policy" <<JSON
{
  "Version": "2012-10-17",
  "Statement": [
    {
      "Effect": "Allow",
      "Action": ["s3:ListBucket", "s3:GetBucketLocation", "s3:ListBucketMultipartUploads"],
      "Resource": ["arn:aws:s3:::$MAPSVC_RASTER_S3_BUCKET", "arn:aws:s3:::$MAPSVC_S3_BUCKET"]
    },
    {
      "Effect": "Allow",
      "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject",
                 "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
      "Resource": ["arn:aws:s3:::$MAPSVC_RASTER_S3_BUCKET/*", "arn:aws:s3:::$MAPSVC_S3_BUCKET/*"]
    }
  ]
}
JSON
mc admin policy create local mapsvc "$policy" >/dev/null
rm -f "$policy"
# made, or its secret key set again
mc admin user add local "$MAPSVC_S3_ACCESS_KEY_ID" "$MAPSVC_S3_SECRET_ACCESS_KEY" >/dev/null
# attaching twice is an error: the second time, the policy is found attached
mc admin policy attach local mapsvc --user "$MAPSVC_S3_ACCESS_KEY_ID" >/dev/null 2>&1 ||
  mc admin user info local "$MAPSVC_S3_ACCESS_KEY_ID" --json |
  grep -Eq '"policyName": *"([^"]*,)?mapsvc[,"]'
echo "buckets: $MAPSVC_RASTER_S3_BUCKET, $MAPSVC_S3_BUCKET; user $MAPSVC_S3_ACCESS_KEY_ID with policy mapsvc"
