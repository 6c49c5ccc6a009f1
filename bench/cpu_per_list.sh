#!/usr/bin/env bash
# CPU per ListTasks of the web process: the list_tasks phase of the A2A comparison bench (the
# first page, server default page size, of a caller with 1,000 tasks) without pinning cores, so
# that it can run beside other work. One uvicorn process of this checkout on PostgreSQL and
# Redis, the demo tenant seeded and N blocking SendMessage calls to `support` made through it
# and a Celery worker (as compare.sh's create phase); then wrk sends ListTasks at concurrency C
# for SECS seconds. Prints req/s and the web process's CPU per call (from /proc/<pid>/stat),
# which drifts much less with a shared machine's load than req/s. PROFILE=1 records the web
# process with py-spy (pip install py-spy) into OUTDIR/web.txt (collapsed stacks). PARAMS is
# ListTasks' params object's members (default none). METHOD=GetTask sends GetTask (JSON-RPC)
# for one of the caller's tasks at random instead, METHOD=RestGetTask the same as
# `GET {agent}/tasks/{id}` (the HTTP+JSON binding). PYSPY names py-spy (default .venv/bin/py-spy),
# PYSPY_RATE its samples per second (default 100). EXTRA_ENV adds settings to the server's
# environment (EXTRA_ENV="A2A_DB_ASYNC_POOL_SIZE=64").
# Run from the project's root:
#
#   bench/cpu_per_list.sh OUTDIR [seconds] [concurrency]
#
# Environment: LIST_DB (default cs_list), LIST_REDIS (default 8), LIST_PORT (default 8492),
# LIST_TASKS (default 1000). A database that already holds the caller's LIST_TASKS tasks is
# kept (the seeding takes a minute); LIST_FRESH=1 drops and makes it again.
set -u
OUT=${1:?usage: cpu_per_list.sh OUTDIR [seconds] [concurrency]}; SECS=${2:-15}; C=${3:-64}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
DB=${LIST_DB:-cs_list}; REDIS=${LIST_REDIS:-8}; PORT=${LIST_PORT:-8492}; N=${LIST_TASKS:-1000}
envs=(DEBUG=false SECRET_KEY=bench-only-secret-key-0123456789abcdefghijklmnopqrstuvwxyz
  ALLOWED_HOSTS=127.0.0.1,localhost SECURE_SSL_REDIRECT=false SESSION_COOKIE_SECURE=false
  CSRF_COOKIE_SECURE=false DEMO_OPERATOR_PASSWORD=bench-only-password
  DATABASE_URL=postgres://postgres@127.0.0.1:5432/$DB CELERY_BROKER_URL=redis://127.0.0.1:6379/$REDIS
  CELERY_QUEUE=list-bench-$$ VAR_DIR=$OUT/var ${EXTRA_ENV:-})
command -v wrk >/dev/null || { echo "needs wrk (apt-get install wrk)"; exit 2; }
url=http://127.0.0.1:$PORT/a2a/demo/support
count_tasks() {
  psql -h 127.0.0.1 -U postgres -d "$DB" -Atc "SELECT count(*) FROM runtime_task t JOIN runtime_agent a
    ON a.id = t.agent_id WHERE a.slug = 'support' AND t.subject = 'partner:demo-client'" 2>/dev/null
}

if [ "${LIST_FRESH:-}" = 1 ] || [ "$(count_tasks)" != "$N" ]; then
  psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1
  psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE $DB" >/dev/null || exit 1
  seed=1
fi
redis-cli -n "$REDIS" flushdb >/dev/null
env "${envs[@]}" .venv/bin/python manage.py migrate --noinput >/dev/null || exit 1
token=$(env "${envs[@]}" .venv/bin/python manage.py seed_demo --json | python3 -c "import json,sys; print(json.load(sys.stdin)['token'])")

env "${envs[@]}" .venv/bin/uvicorn config.asgi:application --port "$PORT" --no-access-log \
  --lifespan "${LIFESPAN:-on}" >"$OUT/web.log" 2>&1 &
web=$!
trap 'kill $web 2>/dev/null; wait $web 2>/dev/null' EXIT
for _ in $(seq 1 150); do curl -s -o /dev/null "http://127.0.0.1:$PORT/healthz" && break; sleep 0.2; done

if [ "${seed:-}" = 1 ]; then
  env "${envs[@]}" .venv/bin/celery -A config --quiet worker --loglevel WARNING \
    --without-gossip --without-mingle --without-heartbeat >"$OUT/worker.log" 2>&1 &
  worker=$!
  trap 'kill $web $worker 2>/dev/null; wait $web $worker 2>/dev/null' EXIT
  python3 - "$url" "$token" "$N" <<'PY' || exit 1
import concurrent.futures, json, sys, urllib.request, uuid
url, token, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
def send(i):
    body = {"jsonrpc": "2.0", "id": i, "method": "SendMessage", "params": {"message": {
        "messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": [{"text": "bench setup"}]}}}
    request = urllib.request.Request(url, json.dumps(body).encode(), {
        "Content-Type": "application/json", "Authorization": f"Bearer {token}", "A2A-Version": "1.0"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)["result"]["task"]["status"]["state"]
with concurrent.futures.ThreadPoolExecutor(32) as pool:
    states = list(pool.map(send, range(n)))
print(f"seeded {n} tasks: {sum(s == 'TASK_STATE_COMPLETED' for s in states)} completed")
PY
  kill $worker; wait $worker 2>/dev/null
  trap 'kill $web 2>/dev/null; wait $web 2>/dev/null' EXIT
fi

METHOD=${METHOD:-ListTasks}
if [ "$METHOD" = ListTasks ]; then
cat > "$OUT/list.lua" <<LUA
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $token"
wrk.headers["A2A-Version"] = "1.0"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{${PARAMS:-}}}'
LUA
else
ids=$(psql -h 127.0.0.1 -U postgres -d "$DB" -Atc "SELECT public_id FROM runtime_task t JOIN runtime_agent a
  ON a.id = t.agent_id WHERE a.slug = 'support' AND t.subject = 'partner:demo-client'" | sed 's/.*/"&"/' | paste -sd,)
cat > "$OUT/list.lua" <<LUA
local ids = {$ids}
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $token"
wrk.headers["A2A-Version"] = "1.0"
request = function()
  local id = ids[math.random(#ids)]
  if "$METHOD" == "RestGetTask" then
    return wrk.format("GET", "/a2a/demo/support/tasks/" .. id)
  end
  return wrk.format("POST", nil, nil,
    '{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"' .. id .. '"}}')
end
LUA
fi
PYSPY=${PYSPY:-.venv/bin/py-spy}
curl -s -X POST -H "Content-Type: application/json" -H "Authorization: Bearer $token" \
  -H "A2A-Version: 1.0" --data "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ListTasks\",\"params\":{${PARAMS:-}}}" \
  "$url" >"$OUT/page.json"

wrk -t1 -c"$C" -d3s --timeout 30s -s "$OUT/list.lua" "$url" >"$OUT/warmup.txt"
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
w0=$(cpu $web)
if [ "${PROFILE:-}" = 1 ]; then
  "$PYSPY" record -p $web -d "$SECS" -r ${PYSPY_RATE:-100} --gil --nonblocking -f raw -o "$OUT/web.txt" >/dev/null 2>&1 &
  spy=$!
fi
wrk -t1 -c"$C" -d"${SECS}s" --timeout 30s --latency -s "$OUT/list.lua" "$url" >"$OUT/list.txt"
w1=$(cpu $web)
[ "${PROFILE:-}" = 1 ] && wait $spy
n=$(awk '/requests in/ {print $1}' "$OUT/list.txt")
METHOD=$METHOD python3 - "$n" "$w0" "$w1" "$(getconf CLK_TCK)" "$SECS" "$OUT/list.txt" "$OUT/page.json" <<'PY'
import json, os, re, sys
n, w0, w1, tck, secs = (float(x) for x in sys.argv[1:6])
text = open(sys.argv[6]).read()
page = json.load(open(sys.argv[7]))["result"]
p99 = re.search(r"99%\s+(\S+)", text)
non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
print(f"{os.environ.get('METHOD', 'ListTasks')} ({len(page['tasks'])} of {page['totalSize']} tasks): {n:.0f} calls in {secs:.0f}s "
      f"= {n / secs:.0f} req/s, p99 {p99.group(1) if p99 else '?'}, non-2xx {non2xx.group(1) if non2xx else 0}")
print(f"CPU per call: web {(w1 - w0) / tck / n * 1000:.2f} ms ({(w1 - w0) / tck / secs * 100:.0f}% of a core)")
PY
