#!/usr/bin/env bash
# `fedrt bench fleet` against `mpirun -np 2 fedrt serve --mpi`: 40 devices
# spread over both ranks' addresses, those on the wrong rank redirected to
# their shard; every device joins and every update of 2 rounds is accepted
# (rank 0's metrics file), with one pid per rank for the memory figures.
# Usage: mpi_fleet_test.sh FEDRT TINY_IDX_DIR
set -euo pipefail
fedrt=$1 data=$2
work=$(mktemp -d)
echo "work: $work"
trap 'kill $(jobs -p) 2>/dev/null || true; [[ -n ${KEEP:-} ]] || rm -rf "$work"' EXIT
"$fedrt" keygen --devices 40 --out "$work/keys" >/dev/null
mpi=(mpirun --oversubscribe -np 2)
if [[ $(id -u) -eq 0 ]]; then
  mpi+=(--allow-run-as-root)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
"${mpi[@]}" "$fedrt" serve --mpi --key-file "$work/keys/keys.txt" --host 127.0.0.1 --port 0 --codec dqsg \
  --model mlp:784-32-10 --rounds 2 --min-devices 40 --data "" --metrics "$work/m.jsonl" --deadline-ms 120000 \
  --join-timeout-ms 60000 >"$work/serve.log" 2>&1 &
launcher=$!
ports=()
for _ in $(seq 600); do
  mapfile -t ports < <(sed -n 's/^rank \([01]\) listening on port \([0-9]*\)$/\1 \2/p' "$work/serve.log" | sort -n |
                       awk '{print $2}')
  [[ ${#ports[@]} -eq 2 ]] && break
  kill -0 $launcher 2>/dev/null || break
  sleep 0.1
done
[[ ${#ports[@]} -eq 2 ]] || { echo "the ranks did not listen:"; cat "$work/serve.log"; exit 1; }
pids=""
for p in $(pgrep -P $launcher); do
  rank=$(tr '\0' '\n' <"/proc/$p/environ" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
  [[ -n $rank ]] && pids+="$rank $p"$'\n'
done
pids=$(printf '%s' "$pids" | sort -n | awk '{print $2}' | paste -sd,)
"$fedrt" bench fleet --devices 40 --rounds 2 --codec dqsg --model mlp:784-32-10 --data "$data" \
  --server "127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}" --key-file "$work/keys/keys.txt" \
  --server-pid "$pids" --server-metrics "$work/m.jsonl" --timeout 120 --json >"$work/fleet.json" ||
  { echo "bench failed:"; cat "$work/fleet.json" "$work/serve.log"; exit 1; }
wait $launcher || { echo "serve failed:"; cat "$work/serve.log"; exit 1; }
/usr/bin/python3 - "$work/fleet.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print({k: j.get(k) for k in ("joined", "redirected", "updates_accepted", "rounds_applied", "rss_bytes_per_device")})
assert j["joined"] == 40 and j["failed"] == 0, j
assert j["redirected"] > 0, j                  # half the devices dialled the other rank
assert j["updates_accepted"] == 80 and j["rounds_applied"] == 2, j
assert len(j["servers"]) == 2 and all(s["rss_bytes_joined"] > 0 for s in j["servers"]), j
PY
