#!/usr/bin/env bash
# fedrt's ring all-reduce against OpenMPI's MPI_Allreduce over TCP on
# loopback, run alternately (fedrt, MPI, fedrt, MPI, ...) so both see the same
# machine load. A benchmark, not a test; OpenMPI is needed for it only:
#   apt-get install openmpi-bin libopenmpi-dev
#
# Usage: runtime/bench/allreduce_vs_mpi.sh [FEDRT_BINARY] [ROUNDS] [SIZES] [PEERS...]
#   defaults: build/release/runtime/fedrt, 3 rounds, 16777216 bytes, peers 2 4
#   SIZES: bytes, several separated by commas (4096,65536,1048576,16777216).
#   ITERATIONS (environment, default 20) timed calls per run; sizes below
#   1 MiB, which take microseconds, run ten times as many.
# Expected output: the load average, then per round, size and peer count one
# `allreduce fp32 ...` line (fedrt) and one `MPI_Allreduce fp32 ...` line, each
# with p50, p99, bus bandwidth and the CPU time of all processes per call.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
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

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)  ($(nproc) cores)"
for round in $(seq 1 "$rounds"); do
  for size in ${sizes//,/ }; do
    n=$iterations
    (( size >= 1048576 )) || n=$(( 10 * iterations ))
    for p in "${peers[@]}"; do
      echo "round $round, $size bytes, $p processes:"
      "$fedrt" bench allreduce --peers "$p" --size "$size" --iterations "$n"
      mpirun --oversubscribe -np "$p" --mca btl tcp,self --mca btl_tcp_if_include lo \
        "$mpi_bench" --size "$size" --iterations "$n"
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
