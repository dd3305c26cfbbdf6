#!/usr/bin/env bash
# The test command: lint, types, migrations on a fresh database, then the test suite (gpu tests skip here).
# The default suite leaves out the `slow` tier (real torch-extension builds, browser runs, whole benchmark
# commands, workers killed mid-job: half a minute to minutes each); `scripts/test.sh --slow` runs that tier alone, and CI (.ci/run) runs both.
set -euo pipefail
cd "$(dirname "$0")/.."
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
bash scripts/services.sh >/dev/null
if [ "${1:-}" = --slow ]; then
  shift
  exec python3 -m pytest -m "slow and not gpu" --durations=20 "$@"
fi

ruff check .
ruff format --check .
mypy

# Migrations on a fresh database: upgrade, no drift against the models, and a full round trip.
db=cuda_agent_migcheck
psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
export DATABASE_URL="postgresql+psycopg://postgres@127.0.0.1:5432/$db"
alembic upgrade head && alembic check && alembic downgrade base && alembic upgrade head
unset DATABASE_URL

python3 -m pytest -m "not slow" --durations=30 "$@"

# The selftest's default part for CI: every route of every service, authenticated and not, across tenants, and
# schemathesis over each: one table against a real stack (the other parts: `cuda-agent selftest`, README).
if [ $# -eq 0 ]; then
  cuda-agent selftest --parts tenancy,badinput
  # The kernel author's generality on composed problems it has never seen (CPU, seconds): 99% on 2026-12-03.
  cuda-agent bench coverage --count 200 --threshold 0.95
fi
