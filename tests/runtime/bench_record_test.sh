#!/usr/bin/env bash
# runtime/bench/allreduce_vs_mpi.sh --record as a user runs it, with stand-ins
# for OpenMPI (an mpirun that runs the program it is given, an MPI benchmark
# that prints a fixed line): the real `fedrt bench allreduce` runs, and a
# dated section with one table row per run lands in the results file.
# Usage: bench_record_test.sh FEDRT SOURCE_DIR
set -euo pipefail
fedrt="$1"
src="$2"
source "$src/tests/runtime/bench_record_checks.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir "$work/bin"
cat > "$work/bin/mpirun" <<'SH'
#!/bin/sh
# Skips mpirun's own options: runs the benchmark and its arguments.
for a; do
  shift
  if [ "$a" = "$MPI_BENCH" ]; then exec "$a" "$@"; fi
done
exit 2
SH
cat > "$work/mpi_bench" <<'SH'
#!/bin/sh
echo "MPI_Allreduce fp32  peers 2  size $2 bytes  iterations $4  p50 0.020 ms  p99 0.030 ms  bus bandwidth 0.205 GB/s  cpu 0.050 ms per all-reduce (all processes)"
SH
chmod +x "$work/bin/mpirun" "$work/mpi_bench"

fail() { echo "FAIL: $*"; echo "--- results file:"; cat "$work/allreduce.md" 2>/dev/null || true; exit 1; }

PATH="$work/bin:$PATH" MPI_BENCH="$work/mpi_bench" FEDRT_BENCH_RECORD_DIR="$work" ITERATIONS=2 \
  bash "$src/runtime/bench/allreduce_vs_mpi.sh" --record "$fedrt" 1 4096 2 > "$work/out.txt" 2>&1 ||
  { cat "$work/out.txt"; fail "the script failed"; }
md="$work/allreduce.md"
check_record_section "$work/out.txt" "$md" 'Dense fp32 all-reduce, fedrt against OpenMPI \(loopback TCP\)' \
  "runtime/bench/allreduce_vs_mpi.sh $fedrt 1 4096 2" \
  '| round | implementation | processes | bytes | iterations | p50 ms | p99 ms | bus GB/s | CPU ms per all-reduce |'
grep -Eq '^\| 1 \| fedrt \| 2 \| 4096 \| 200 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$' "$md" || fail "no fedrt row"
grep -q '^| 1 | OpenMPI | 2 | 4096 | 200 | 0.020 | 0.030 | 0.205 | 0.050 |$' "$md" || fail "no OpenMPI row"
# The summary over rounds: fedrt's median p50 against OpenMPI's 0.020 ms.
grep -Eq '^ +4096 bytes, 2 processes: p50 median fedrt [0-9.]+ ms, OpenMPI 0\.020 ms, ratio [0-9.]+; per round [0-9.]+$' \
  "$work/out.txt" || { cat "$work/out.txt"; fail "no summary line"; }
# Without --record nothing is written.
PATH="$work/bin:$PATH" MPI_BENCH="$work/mpi_bench" FEDRT_BENCH_RECORD_DIR="$work/none" ITERATIONS=2 \
  bash "$src/runtime/bench/allreduce_vs_mpi.sh" "$fedrt" 1 4096 2 > /dev/null 2>&1 || fail "the plain run failed"
[ ! -e "$work/none" ] || fail "a plain run recorded"
echo "ok"
