#!/usr/bin/env bash
# Server CPU per request (GetTask, ListTasks) of the anchor and of this checkout, and of another
# checkout (BEFORE=/path/to/a/worktree with its .venv) if given: one server after another under
# the same wrk load (server on core 0, wrk on core 1), on the databases the A2A comparison bench
# left behind (OURS_DB, default cs_bench; ANCHOR_DB, default anchor; the anchor's venv under
# var/bench/anchor-venv). That bench kit (its compare.sh and the a2a-sdk reference server,
# sdk_server.py) is not part of this repository: BENCH_KIT names its folder. CPU time per
# request drifts much less with the load of a shared machine than req/s does. Run from the
# project's root:   BENCH_KIT=/path/to/kit bench/cpu_per_request.sh OUTDIR [seconds]
set -u
OUT=${1:?usage: cpu_per_request.sh OUTDIR [seconds]}; SECS=${2:-10}
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
HERE=$(pwd)
OURS_DB=${OURS_DB:-cs_bench}; ANCHOR_DB=${ANCHOR_DB:-anchor}
BENCH_KIT=${BENCH_KIT:?set BENCH_KIT to the A2A comparison bench kit (compare.sh, sdk_server.py)}
ours_env=(DEBUG=false SECRET_KEY=bench-only-secret-key-0123456789abcdefghijklmnopqrstuvwxyz
  ALLOWED_HOSTS=127.0.0.1,localhost SECURE_SSL_REDIRECT=false SESSION_COOKIE_SECURE=false
  CSRF_COOKIE_SECURE=false DEMO_OPERATOR_PASSWORD=bench-only-password
  DATABASE_URL=postgres://postgres@127.0.0.1:5432/$OURS_DB CELERY_BROKER_URL=redis://127.0.0.1:6379/7)

lua() {  # name token ids method
  local ids=$3
  cat > "$OUT/$1-$4.lua" <<LUA
local ids = {$ids}
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $2"
wrk.headers["A2A-Version"] = "1.0"
request = function()
  if "$4" == "GetTask" then
    return wrk.format(nil, nil, nil, '{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"' .. ids[math.random(#ids)] .. '"}}')
  end
  return wrk.format(nil, nil, nil, '{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}')
end
LUA
}

measure() {  # name pid url method
  local cpu0 cpu1 rps
  taskset -c 1 wrk -t1 -c64 -d3s -s "$OUT/$1-$4.lua" "$3" >/dev/null
  cpu0=$(awk '{print $14+$15}' /proc/$2/stat)
  taskset -c 1 wrk -t1 -c64 -d${SECS}s --latency -s "$OUT/$1-$4.lua" "$3" > "$OUT/$1-$4.txt"
  cpu1=$(awk '{print $14+$15}' /proc/$2/stat)
  rps=$(awk '/Requests\/sec/ {print $2}' "$OUT/$1-$4.txt")
  python3 -c "
import sys; rps=float('$rps'); cpu=($cpu1-$cpu0)/$(getconf CLK_TCK)
n=rps*$SECS
print(f'$1 $4: {rps:.0f} req/s, server CPU {cpu/$SECS*100:.0f}% of a core, {cpu/n*1000:.2f} ms CPU per request', '$(grep -E 'Non-2xx' "$OUT/$1-$4.txt" | tr -s ' ')')"
}

wait_up() { for _ in $(seq 1 150); do curl -s -o /dev/null "$1" && return; sleep 0.2; done; }

# the anchor
ids=$(psql -h 127.0.0.1 -U postgres -d $ANCHOR_DB -Atc "select id from anchor_tasks_support limit 1000" | sed 's/.*/"&"/' | paste -sd,)
lua anchor bench-token "$ids" GetTask; lua anchor bench-token "$ids" ListTasks
ANCHOR_STORE=postgres ANCHOR_TOKEN=bench-token PORT=8480 \
  ANCHOR_DB_URL=postgresql+asyncpg://anchor:anchor@127.0.0.1:5432/$ANCHOR_DB \
  taskset -c 0 var/bench/anchor-venv/bin/python "$BENCH_KIT/sdk_server.py" >"$OUT/anchor.log" 2>&1 &
pid=$!; wait_up http://127.0.0.1:8480/a2a/demo/support/.well-known/agent-card.json
measure anchor $pid http://127.0.0.1:8480/a2a/demo/support GetTask
measure anchor $pid http://127.0.0.1:8480/a2a/demo/support ListTasks
kill $pid; wait $pid 2>/dev/null

# main (before) and this branch (after)
ids=$(psql -h 127.0.0.1 -U postgres -d $OURS_DB -Atc "select public_id from runtime_task t join runtime_agent a on a.id=t.agent_id where a.slug='support' and t.subject='partner:demo-client' limit 1000" | sed 's/.*/"&"/' | paste -sd,)
sides=(); [ -n "${BEFORE:-}" ] && sides+=("before:$BEFORE"); sides+=("this:$HERE")
for side in "${sides[@]}"; do
  name=${side%%:*}; root=${side#*:}
  token=$(cd "$root" && env "${ours_env[@]}" .venv/bin/python manage.py seed_demo --json | python3 -c "import json,sys; print(json.load(sys.stdin)['token'])")
  lua $name "$token" "$ids" GetTask; lua $name "$token" "$ids" ListTasks
  (cd "$root" && exec env "${ours_env[@]}" taskset -c 0 .venv/bin/uvicorn config.asgi:application --port 8481 --no-access-log) >"$OUT/$name.log" 2>&1 &
  pid=$!; wait_up http://127.0.0.1:8481/
  measure $name $pid http://127.0.0.1:8481/a2a/demo/support GetTask
  measure $name $pid http://127.0.0.1:8481/a2a/demo/support ListTasks
  kill $pid; wait $pid 2>/dev/null
done
