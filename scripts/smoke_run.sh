#!/usr/bin/env bash
# Start `make run` on the embedded default (SQLite, filesystem broker) in a scratch folder,
# poll until it prints its banner and GET / answers with the login page, then stop it. Exits non-zero on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
scratch=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
log="$scratch/run.log"
env -u DATABASE_URL -u CELERY_BROKER_URL VAR_DIR="$scratch/var" PORT="$port" \
  setsid make run >"$log" 2>&1 &
pid=$!
cleanup() {
  kill -TERM -- -"$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  # The worker's threads may still write into var/ while they stop: retry, and never let the
  # clean-up turn a passed check into a failure.
  for _ in 1 2 3 4 5 6 7 8 9 10; do rm -rf "$scratch" 2>/dev/null && break; sleep 0.5; done
  return 0
}
trap cleanup EXIT
for _ in $(seq 1 120); do
  # The banner comes last, once the web server and the worker are up.
  if grep -q "Press Ctrl-C to stop." "$log" && page=$(curl -fsSL "http://127.0.0.1:$port/" 2>/dev/null) \
      && grep -q 'name="password"' <<<"$page"; then
    echo "smoke: make run answered GET / with the login page on port $port"
    grep -E "operator login|partner token|operator token" "$log" | sed 's/cs_[A-Za-z0-9_-]*/cs_…/'
    exit 0
  fi
  if ! kill -0 "$pid" 2>/dev/null; then break; fi
  sleep 1
done
echo "smoke: make run did not serve the login page; its output:" >&2
cat "$log" >&2
exit 1
