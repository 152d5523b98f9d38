#!/usr/bin/env bash
# fedrt's ring all-reduce against OpenMPI's MPI_Allreduce over TCP on
# loopback, run alternately (fedrt, MPI, fedrt, MPI, ...) so both see the same
# machine load. A benchmark, not a test; OpenMPI is needed for it only:
#   apt-get install openmpi-bin libopenmpi-dev
#
# Usage: runtime/bench/allreduce_vs_mpi.sh [--record] [FEDRT_BINARY] [ROUNDS] [SIZES] [PEERS...]
#   --record (or FEDRT_BENCH_RECORD=1): also append the results as a dated
#   table to docs/benchmarks/allreduce.md (runtime/bench/record.sh).
#   defaults: build/release/runtime/fedrt, 3 rounds, 16777216 bytes, peers 2 4
#   SIZES: bytes, several separated by commas (4096,65536,1048576,16777216).
#   ITERATIONS (environment, default 20) timed calls per run; sizes below
#   1 MiB, which take microseconds, run ten times as many.
# Expected output: the load average, then per round, size and peer count one
# `round R: allreduce fp32 ...` line (fedrt) and one `round R: MPI_Allreduce
# fp32 ...` line, each with p50, p99, bus bandwidth and the CPU time of all
# processes per call.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/record.sh"
bench_record_parse "$@"
set -- "${BENCH_ARGS[@]}"
command="runtime/bench/allreduce_vs_mpi.sh $*"
fedrt="${1:-$here/../../build/release/runtime/fedrt}"
rounds="${2:-3}"
sizes="${3:-16777216}"
shift $(( $# < 3 ? $# : 3 ))
peers=("$@")
[ ${#peers[@]} -gt 0 ] || peers=(2 4)
iterations="${ITERATIONS:-20}"

mpi_bench="${MPI_BENCH:-$(mktemp -d)/mpi_allreduce_bench}"
if [ ! -x "$mpi_bench" ]; then
  mpicxx -O2 -std=c++17 "$here/mpi_allreduce_bench.cc" -o "$mpi_bench"
fi
# OpenMPI refuses to run as root unless told this is intended.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
echo "load average before: $load_before  ($(nproc) cores)"
for round in $(seq 1 "$rounds"); do
  for size in ${sizes//,/ }; do
    n=$iterations
    (( size >= 1048576 )) || n=$(( 10 * iterations ))
    for p in "${peers[@]}"; do
      echo "round $round, $size bytes, $p processes:"
      "$fedrt" bench allreduce --peers "$p" --size "$size" --iterations "$n" | sed "s/^/round $round: /" | tee -a "$out"
      mpirun --oversubscribe -np "$p" --mca btl tcp,self --mca btl_tcp_if_include lo \
        "$mpi_bench" --size "$size" --iterations "$n" | sed "s/^/round $round: /" | tee -a "$out"
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
if (( BENCH_RECORD )); then
  # One row per run: the lines above, cut into their figures.
  sed -nE 's/^round ([0-9]+): (allreduce|MPI_Allreduce) fp32  peers ([0-9]+)  size ([0-9]+) bytes  iterations ([0-9]+)  p50 ([0-9.]+) ms  p99 ([0-9.]+) ms  bus bandwidth ([0-9.]+) GB\/s  cpu ([0-9.]+) ms.*/| \1 | \2 | \3 | \4 | \5 | \6 | \7 | \8 | \9 |/p' "$out" |
    sed 's/| allreduce |/| fedrt |/; s/| MPI_Allreduce |/| OpenMPI |/' |
    { echo "| round | implementation | processes | bytes | iterations | p50 ms | p99 ms | bus GB/s | CPU ms per all-reduce |"; cat; } |
    bench_record allreduce.md "Dense fp32 all-reduce, fedrt against OpenMPI (loopback TCP)" "$command" "$load_before" "$fedrt"
fi
