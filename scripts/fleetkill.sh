#!/usr/bin/env bash
# How long a fleet takes to drain when workers die: 3 workers of BINARY
# drain ITEMS items on a throwaway PostgreSQL against `sawtooth sim`
# with a quota of RPS requests a second; KILLS of them (those started
# without --input) are SIGKILLed KILL_AT seconds after the first starts,
# and the one left finishes. It prints the wall time, the quota's time
# (ITEMS / RPS: one classify call per item) and their ratio (quota's
# time / wall time: 1 is as fast as the quota allows).
#
#   go build -o /tmp/sawtooth . && scripts/fleetkill.sh /tmp/sawtooth
#   ITEMS=3000 RPS=100 KILL_AT=10 KILLS=2 scripts/fleetkill.sh /tmp/sawtooth [extra run flags]
#
# Extra arguments go to every worker's `run` (e.g. --heartbeat 5s);
# TRACE=1 prints the items done each second after the kills. It
# needs the PostgreSQL binaries (scripts/pgserver.sh); everything it
# starts it stops by pid, and its files are in a temporary directory.
set -euo pipefail

[ $# -ge 1 ] || { echo "usage: $0 BINARY [run flags]" >&2; exit 2; }
bin=$(readlink -f "$1")
shift
items=${ITEMS:-3000} rps=${RPS:-100} kill_at=${KILL_AT:-10} kills=${KILLS:-2}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
[ "$(id -u)" != 0 ] || chmod 755 "$tmp"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  "$here/pgserver.sh" stop "$tmp/pg" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

url=$("$here/pgserver.sh" start "$tmp/pg" fast)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$bin" sim --addr "127.0.0.1:$port" --sim-rpm "$rps" --sim-window 1s --seed 7 >"$tmp/sim.log" 2>&1 &
pids+=($!)
awk -v n="$items" 'BEGIN { split("the app crashes when I open it|the subscription is too expensive|please add a dark mode|the layout is confusing|I love this app", t, "|");
  for (i = 0; i < n; i++) printf "{\"id\":\"r%05d\",\"text\":\"%s (review %d)\",\"app\":\"a%d\",\"rating\":%d,\"date\":\"2026-%02d-01\"}\n", i, t[i%5+1], i, i%3, i%5+1, i%12+1 }' >"$tmp/items.jsonl"
for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
export GEMINI_API_KEY=sim-key GOOGLE_GEMINI_BASE_URL="http://127.0.0.1:$port"

start=$(date +%s.%N)
"$bin" run --db "$url" --quiet --input "$tmp/items.jsonl" "$@" >"$tmp/w0.out" 2>"$tmp/w0.err" &
first=$!
pids+=($first)
until "$bin" status --db "$url" --json 2>/dev/null | grep -q "\"items\": *$items"; do sleep 0.2; done
victims=()
for i in $(seq 2 3); do
  "$bin" run --db "$url" --quiet "$@" >"$tmp/w$i.out" 2>"$tmp/w$i.err" &
  pids+=($!)
  [ "${#victims[@]}" -ge "$kills" ] || victims+=($!)
done
sleep "$(echo "$start + $kill_at - $(date +%s.%N)" | bc)"
for v in "${victims[@]}"; do kill -9 "$v"; done
if [ -n "${TRACE:-}" ]; then # items done each second, on stderr
  ( while kill -0 "$first" 2>/dev/null; do
      printf '+%.0fs %s\n' "$(echo "$(date +%s.%N) - $start" | bc)" "$("$bin" status --db "$url" --json 2>/dev/null | tr -d ' \n' | grep -o '"done":[0-9]*' | head -1)" >&2
      sleep 1
    done ) &
fi
rc=0
wait "$first" || rc=$?
end=$(date +%s.%N)
"$bin" status --db "$url" --json >"$tmp/status.json"
wall=$(echo "$end - $start" | bc)
quota=$(echo "scale=2; $items / $rps" | bc)
ratio=$(echo "scale=3; $quota / $wall" | bc)
done_=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["counts"]; print(c["done"], "done,", c.get("dead", 0), "dead")' "$tmp/status.json")
printf 'items %d, %d workers, %d SIGKILLed at +%ss: wall %.1f s, quota %.1f s, quota/wall %.3f, last worker exit %d, %s\n' \
  "$items" 3 "$kills" "$kill_at" "$wall" "$quota" "$ratio" "$rc" "$done_"
