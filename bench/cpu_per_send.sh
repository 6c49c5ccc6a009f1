#!/usr/bin/env bash
# CPU per blocking SendMessage, web and worker apart: one uvicorn process and one Celery worker
# (threads, as `make run` starts them, without beat) of this checkout on PostgreSQL and Redis,
# the demo tenant seeded, then wrk sends blocking SendMessage calls to `support` (a new context and
# messageId each) at concurrency C for SECS seconds. Prints req/s and the CPU seconds each process
# spent per call (from /proc/<pid>/stat), which drift much less with a shared machine's load than
# req/s. PROFILE=1 records the web process with py-spy (pip install py-spy) into OUTDIR/web.svg
# and its collapsed stacks into OUTDIR/web.txt, the worker's into OUTDIR/worker.txt (PYSPY_RATE
# samples per second, default 100). Run from the project's root:
#
#   bench/cpu_per_send.sh OUTDIR [seconds] [concurrency]
#
# Environment: SEND_DB (default cs_send, dropped and made again), SEND_REDIS (default 7),
# SEND_PORT (default 8491).
set -u
OUT=${1:?usage: cpu_per_send.sh OUTDIR [seconds] [concurrency]}; SECS=${2:-15}; C=${3:-64}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
DB=${SEND_DB:-cs_send}; REDIS=${SEND_REDIS:-7}; PORT=${SEND_PORT:-8491}
envs=(DEBUG=false SECRET_KEY=bench-only-secret-key-0123456789abcdefghijklmnopqrstuvwxyz
  ALLOWED_HOSTS=127.0.0.1,localhost SECURE_SSL_REDIRECT=false SESSION_COOKIE_SECURE=false
  CSRF_COOKIE_SECURE=false DEMO_OPERATOR_PASSWORD=bench-only-password
  DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB CELERY_BROKER_URL=redis://127.0.0.1:6379/$REDIS
  CELERY_QUEUE=send-bench-$$ VAR_DIR=$OUT/var)
command -v wrk >/dev/null || { echo "needs wrk (apt-get install wrk)"; exit 2; }

psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1
psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE $DB" >/dev/null || exit 1
redis-cli -n "$REDIS" flushdb >/dev/null
env "${envs[@]}" .venv/bin/python manage.py migrate --noinput >/dev/null || exit 1
token=$(env "${envs[@]}" .venv/bin/python manage.py seed_demo --json | python3 -c "import json,sys; print(json.load(sys.stdin)['token'])")

env "${envs[@]}" .venv/bin/uvicorn config.asgi:application --port "$PORT" --no-access-log \
  --lifespan "${LIFESPAN:-on}" >"$OUT/web.log" 2>&1 &
web=$!
env "${envs[@]}" .venv/bin/celery -A config --quiet worker --loglevel WARNING \
  --without-gossip --without-mingle --without-heartbeat >"$OUT/worker.log" 2>&1 &
worker=$!
trap 'kill $web $worker 2>/dev/null; wait $web $worker 2>/dev/null' EXIT
for _ in $(seq 1 150); do curl -s -o /dev/null "http://127.0.0.1:$PORT/healthz" && break; sleep 0.2; done

cat > "$OUT/send.lua" <<LUA
local counter = 0
local run = tostring(os.time()) .. tostring(math.random(1000000))
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $token"
wrk.headers["A2A-Version"] = "1.0"
function setup(thread) thread:set("tid", tostring(math.random(1000000000))) end
request = function()
  counter = counter + 1
  return wrk.format(nil, nil, nil, '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"' .. run .. '-' .. tid .. '-' .. counter .. '","role":"ROLE_USER","parts":[{"text":"How do I reset my password?"}]}}}')
end
LUA

url=http://127.0.0.1:$PORT/a2a/demo/support
wrk -t1 -c"$C" -d3s --timeout 30s -s "$OUT/send.lua" "$url" >"$OUT/warmup.txt"
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
# The worker's CPU includes its threads; Celery's threads pool runs in the one process.
w0=$(cpu $web); k0=$(cpu $worker)
if [ "${PROFILE:-}" = 1 ]; then
  "${PYSPY:-.venv/bin/py-spy}" record -p $web -d "$SECS" -r ${PYSPY_RATE:-100} --gil --nonblocking -f raw -o "$OUT/web.txt" >/dev/null 2>&1 &
  spy=$!
  "${PYSPY:-.venv/bin/py-spy}" record -p $worker -d "$SECS" -r ${PYSPY_RATE:-100} --gil --nonblocking -f raw -o "$OUT/worker.txt" >/dev/null 2>&1 &
  spyw=$!
fi
wrk -t1 -c"$C" -d"${SECS}s" --timeout 30s --latency -s "$OUT/send.lua" "$url" >"$OUT/send.txt"
w1=$(cpu $web); k1=$(cpu $worker)
[ "${PROFILE:-}" = 1 ] && wait $spy $spyw
n=$(awk '/requests in/ {print $1}' "$OUT/send.txt")
python3 - "$n" "$w0" "$w1" "$k0" "$k1" "$(getconf CLK_TCK)" "$SECS" "$OUT/send.txt" <<'PY'
import re, sys
n, w0, w1, k0, k1, tck, secs = (float(x) for x in sys.argv[1:8])
text = open(sys.argv[8]).read()
p99 = re.search(r"99%\s+(\S+)", text)
non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
print(f"SendMessage (blocking, support): {n:.0f} calls in {secs:.0f}s = {n / secs:.0f} req/s, "
      f"p99 {p99.group(1) if p99 else '?'}, non-2xx {non2xx.group(1) if non2xx else 0}")
print(f"CPU per call: web {(w1 - w0) / tck / n * 1000:.2f} ms, worker {(k1 - k0) / tck / n * 1000:.2f} ms "
      f"(web {(w1 - w0) / tck / secs * 100:.0f}% of a core, worker {(k1 - k0) / tck / secs * 100:.0f}%)")
PY
