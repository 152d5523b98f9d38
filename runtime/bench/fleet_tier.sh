#!/usr/bin/env bash
# The runs of docs/benchmarks/fleet.md, "The same fleet against mpirun": the
# same fleet against `mpirun -np 4 fedrt serve --mpi` and against one `fedrt
# serve`, both driven through --server (devices spread round-robin, redirected
# to their shard by the tier), per-rank pids for memory and CPU, server-side
# round times from the (rank 0's) --metrics file.
# Usage: runtime/bench/fleet_tier.sh FEDRT OUTDIR (needs mpirun, python3 and a
# hard open-file limit of 20,000; run it under a quiet machine).
set -u
F=$1 out=$2
mkdir -p "$out"; cd "$out"
ulimit -n 20000
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[[ -f keys10k/keys.txt ]] || $F keygen --devices 10000 --out keys10k >/dev/null
[[ -f keys200/keys.txt ]] || $F keygen --devices 200 --out keys200 >/dev/null
one() {  # one NAME RANKS DEVICES ROUNDS FRACTION CODEC
  local name=$1 ranks=$2 n=$3 rounds=$4 fraction=$5 codec=$6 keys=keys$([[ $3 == 10000 ]] && echo 10k || echo 200)
  rm -f "$name.jsonl"
  local serve=(serve --key-file $keys/keys.txt --host 127.0.0.1 --codec $codec --rounds $rounds --fraction $fraction
               --min-devices $n --data "" --metrics $name.jsonl --log-level warn --deadline-ms 600000)
  local list pids sp
  if [[ $ranks == 1 ]]; then
    $F "${serve[@]}" --port 7300 >"$name.log" 2>&1 & sp=$!
    list=127.0.0.1:7300 pids=$sp
    sleep 1
  else
    mpirun --oversubscribe -np $ranks $F "${serve[@]}" --mpi --port 7400 >"$name.log" 2>&1 & sp=$!
    sleep 2
    pids=$(for p in $(pgrep -P $sp); do echo "$(tr '\0' '\n' </proc/$p/environ | sed -n 's/^OMPI_COMM_WORLD_RANK=//p') $p"; done |
           sort -n | awk '{print $2}' | paste -sd,)
    list=$(for r in $(seq 0 $((ranks - 1))); do echo 127.0.0.1:$((7400 + r)); done | paste -sd,)
  fi
  echo "== $name: $ranks rank(s), $n devices, $rounds rounds, fraction $fraction, $codec"
  $F bench fleet --devices $n --rounds $rounds --codec $codec --server $list --key-file $keys/keys.txt \
     --server-pid $pids --server-metrics $name.jsonl --timeout 200 --json >"$name.json"
  echo "bench exit $?"
  wait $sp; echo "serve exit $?"
  python3 - "$name.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
keys = ["joined", "redirected", "join_seconds", "updates_accepted", "updates_per_second", "round_seconds_p50",
        "round_seconds_p99", "server_cpu_seconds", "decode_sum_bytes_per_second", "rss_bytes_per_device",
        "update_bytes_mean"]
print({k: j.get(k) for k in keys})
for s in j.get("servers", []):
    print("  pid %d RSS %.1f -> %.1f MB, CPU %.2f s" % (s["pid"], s["rss_bytes_before"] / 1e6, s["rss_bytes_joined"] / 1e6,
                                                   s["cpu_seconds"] or -1))
PY
}
one tier4-10k-dqsg 4 10000 5 0.02 dqsg
one single-10k-dqsg 1 10000 5 0.02 dqsg
one tier4-200-dqsg 4 200 10 1.0 dqsg
one single-200-dqsg 1 200 10 1.0 dqsg
one tier4-10k-fp32 4 10000 5 0.02 fp32
one single-10k-fp32 1 10000 5 0.02 fp32
