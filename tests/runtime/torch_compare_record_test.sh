#!/usr/bin/env bash
# runtime/bench/torch_compare.sh --record as a user runs it, with a stand-in
# for PyTorch (a step script with torch_step.py's flags that prints a fixed
# JSON line; CI has no python3-torch): the real `fedrt bench train` runs, and
# a dated section with one row per model, implementation and thread count
# lands in the results file.
# Usage: torch_compare_record_test.sh FEDRT SOURCE_DIR
set -euo pipefail
fedrt="$1"
src="$2"
source "$src/tests/runtime/bench_record_checks.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cat > "$work/torch_step.py" <<'PY'
import argparse, json
p = argparse.ArgumentParser()
for flag in ("--model", "--batch", "--threads", "--steps"):
    p.add_argument(flag)
p.add_argument("--json", action="store_true")
a = p.parse_args()
print(json.dumps({"impl": "torch", "model": a.model, "batch": int(a.batch), "threads": int(a.threads),
                  "steps": int(a.steps), "p50_ms": 2.5, "cpu_ms_per_step": 1.25}))
PY

fail() { echo "FAIL: $*"; echo "--- results file:"; cat "$work/training.md" 2>/dev/null || true; exit 1; }

TORCH_STEP="$work/torch_step.py" FEDRT_BENCH_RECORD_DIR="$work" \
  bash "$src/runtime/bench/torch_compare.sh" --record "$fedrt" 3 5 mlp:784-32-10 8 "1 2" > "$work/out.txt" 2>&1 ||
  { cat "$work/out.txt"; fail "the script failed"; }
md="$work/training.md"
check_record_section "$work/out.txt" "$md" 'Training step time, fedrt against PyTorch \(batch 8, 5 steps\)' \
  "runtime/bench/torch_compare.sh $fedrt 3 5 mlp:784-32-10 8 1 2" \
  '| model | implementation | threads | median p50 ms | median CPU ms/step | runs |'
for threads in 1 2; do
  grep -Eq "^\| mlp:784-32-10 \| fedrt \| $threads \| [0-9]+\.[0-9]{3} \| [0-9]+\.[0-9]{3} \| 3 \|$" "$md" ||
    fail "no fedrt row for $threads threads"
  grep -q "^| mlp:784-32-10 | torch | $threads | 2.500 | 1.250 | 3 |$" "$md" || fail "no torch row for $threads threads"
done
[ "$(grep -c '^| mlp' "$md")" = 4 ] || fail "not exactly four rows"
# Without --record nothing is written.
TORCH_STEP="$work/torch_step.py" FEDRT_BENCH_RECORD_DIR="$work/none" \
  bash "$src/runtime/bench/torch_compare.sh" "$fedrt" 1 5 mlp:784-32-10 8 1 > /dev/null 2>&1 || fail "the plain run failed"
[ ! -e "$work/none" ] || fail "a plain run recorded"
echo "ok"
