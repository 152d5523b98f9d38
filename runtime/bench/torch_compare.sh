#!/bin/bash
# Training step time, fedrt against PyTorch on this machine: `fedrt bench
# train` and torch_step.py run alternately (the order swaps every round), ROUNDS
# rounds at 1 and then 2 threads for each model, same model, batch, optimizer
# and OpenBLAS kernels (OPENBLAS_CORETYPE, Haswell unless set). Prints every
# run as JSON with the load average before it, then per model, implementation
# and thread count the median over rounds of the p50 step time and of the CPU
# time per step.
#
# Usage: runtime/bench/torch_compare.sh [--record] [FEDRT] [ROUNDS] [STEPS] [MODELS] [BATCH] [THREADS]
#   --record (or FEDRT_BENCH_RECORD=1): also append the medians as a dated
#   table to docs/benchmarks/training.md (runtime/bench/record.sh).
#   defaults: build/release/runtime/fedrt 5 300
#             "mlp:784-300-100-10 cnn:28x28x1-c8k5-p2-c16k5-p2-d128-10" 64 "1 2"
#   MODELS and THREADS are space-separated lists.
# Needs Debian's python3-torch (a benchmark tool, not a fedrt dependency).
# Expected output (numbers depend on the machine):
#   # round 1 threads 1 load 0.52 0.60 0.71
#   {"impl":"fedrt",...,"p50_ms":1.2,...}
#   {"impl": "torch", ..., "p50_ms": 2.1, ...}
#   ...
#   mlp:784-300-100-10 fedrt threads 1: median p50 1.234 ms, median cpu 1.200 ms/step (5 runs)
#   mlp:784-300-100-10 torch threads 1: median p50 2.100 ms, median cpu 2.050 ms/step (5 runs)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/record.sh"
bench_record_parse "$@"
set -- "${BENCH_ARGS[@]}"
command="runtime/bench/torch_compare.sh $*"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
fedrt=${1:-build/release/runtime/fedrt}
rounds=${2:-5}
steps=${3:-300}
models=${4:-mlp:784-300-100-10 cnn:28x28x1-c8k5-p2-c16k5-p2-d128-10}
batch=${5:-64}
thread_counts=${6:-1 2}
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}
out=$(mktemp)
trap 'rm -f "$out"' EXIT

run_fedrt() { "$fedrt" bench train --model "$1" --batch "$batch" --threads "$2" --steps "$steps" --json; }
# TORCH_STEP: another PyTorch step script with torch_step.py's flags and JSON
# line (the test of --record stands one in where PyTorch is not installed).
torch_step=${TORCH_STEP:-$here/torch_step.py}
run_torch() { /usr/bin/python3 "$torch_step" --model "$1" --batch "$batch" --threads "$2" --steps "$steps" --json; }

for model in $models; do
  for threads in $thread_counts; do
    for round in $(seq 1 "$rounds"); do
      echo "# $model round $round threads $threads load $(cut -d' ' -f1-3 /proc/loadavg)"
      if (( round % 2 )); then
        run_fedrt "$model" "$threads" | tee -a "$out"
        run_torch "$model" "$threads" | tee -a "$out"
      else
        run_torch "$model" "$threads" | tee -a "$out"
        run_fedrt "$model" "$threads" | tee -a "$out"
      fi
    done
  done
done
echo "# end load $(cut -d' ' -f1-3 /proc/loadavg)"
summary=$(/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
for key in sorted({(r["model"], r["threads"], r["impl"]) for r in runs}):
    mine = [r for r in runs if (r["model"], r["threads"], r["impl"]) == key]
    print("%s %s threads %d: median p50 %.3f ms, median cpu %.3f ms/step (%d runs)" % (
        key[0], key[2], key[1], statistics.median(r["p50_ms"] for r in mine),
        statistics.median(r["cpu_ms_per_step"] for r in mine), len(mine)))
PY
)
echo "$summary"
if (( BENCH_RECORD )); then
  echo "$summary" |
    sed -E 's/^([^ ]+) ([^ ]+) threads ([0-9]+): median p50 ([0-9.]+) ms, median cpu ([0-9.]+) ms\/step \(([0-9]+) runs\)$/| \1 | \2 | \3 | \4 | \5 | \6 |/' |
    { echo "| model | implementation | threads | median p50 ms | median CPU ms/step | runs |"; cat; } |
    bench_record training.md "Training step time, fedrt against PyTorch (batch $batch, $steps steps)" "$command" \
      "$load_before" "$fedrt"
fi
