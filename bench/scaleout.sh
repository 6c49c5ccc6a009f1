#!/usr/bin/env bash
# Scale-out: one web process and one worker, then two of each, on one PostgreSQL
# and one Redis, no proxy (the callers are split between the two web ports). Prints calls/s of
# each phase, how many callers on one web process were woken by a turn another worker finished,
# and the lost wake-ups (a caller left waiting until A2A_WAIT_MS). See bench/scaleout.py and
# bench/README.md. Run from the project's root:
#
#   bench/scaleout.sh [--calls 10000] [--single-calls 3000] [--callers 128] [--wait-limit 60]
#                      [--model-wait 0] [--worker-concurrency 32]
#
# Environment: SCALEOUT_DB (default countersign_scaleout; made if missing, each run seeds a new
# tenant in it), SCALEOUT_REDIS (Redis database number, default 9). DATABASE_URL and
# CELERY_BROKER_URL, when set, win over both.
set -eu
cd "$(dirname "$0")/.."
DB=${SCALEOUT_DB:-countersign_scaleout}
psql -h 127.0.0.1 -U postgres -Atc "select 1 from pg_database where datname='$DB'" | grep -q 1 \
  || psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE $DB"
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/$DB}
export CELERY_BROKER_URL=${CELERY_BROKER_URL:-redis://127.0.0.1:6379/${SCALEOUT_REDIS:-9}}
export VAR_DIR=${VAR_DIR:-$PWD/var/bench}
exec .venv/bin/python bench/scaleout.py "$@"
