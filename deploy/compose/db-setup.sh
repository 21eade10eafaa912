#!/bin/sh
# mapsvc's own PostgreSQL role, made with the superuser's password by the `db-setup` service
# of compose.yaml on every `docker compose up` (each step can run again): the role
# MAPSVC_DB_ROLE (password MAPSVC_DB_PASSWORD; no superuser, makes no roles nor databases)
# owns the database PGDATABASE, so it makes its own schema and tables there; PostGIS stays the
# superuser's (the image made it). Environment: psql's PGHOST, PGUSER, PGPASSWORD,
# PGDATABASE, and MAPSVC_DB_ROLE, MAPSVC_DB_PASSWORD.
set -eu
psql --no-psqlrc --quiet -v ON_ERROR_STOP=1 <<'SQL'
\getenv role MAPSVC_DB_ROLE
\getenv password MAPSVC_DB_PASSWORD
SELECT format('CREATE ROLE %I', :'role')
WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'role')
\gexec
ALTER ROLE :"role" WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'password';
ALTER DATABASE :"DBNAME" OWNER TO :"role";
-- what an earlier compose.yaml made as the superuser goes to the role: the auth schema, and
-- the tables and views of both schemas (PostGIS's own, members of its extension, stay)
SELECT format('ALTER SCHEMA %I OWNER TO %I', nspname, :'role')
FROM pg_namespace
WHERE nspname = 'mapsvc_auth' AND nspowner <> :'role'::regrole
\gexec
SELECT format('ALTER TABLE %s OWNER TO %I', c.oid::regclass, :'role')
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname IN ('public', 'mapsvc_auth')
  AND c.relkind IN ('r', 'p', 'v', 'm')
  AND c.relowner <> :'role'::regrole
  AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.objid = c.oid AND d.deptype = 'e')
\gexec
SQL
echo "db-setup: role $MAPSVC_DB_ROLE owns database $PGDATABASE"
