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
#   1 MiB, which take microseconds, run a hundred times as many. Both
#   programs first make a tenth as many untimed calls (at least 3).
# Expected output: the load average, then per round, size and peer count one
# `round R: allreduce fp32 ...` line (fedrt) and one `round R: MPI_Allreduce
# fp32 ...` line, each with p50, p99, bus bandwidth and the CPU time of all
# processes per call; at the end, per size and peer count, the median p50s
# over the rounds, their ratio and every round's ratio.
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
    (( size >= 1048576 )) || n=$(( 100 * iterations ))
    for p in "${peers[@]}"; do
      echo "round $round, $size bytes, $p processes:"
      "$fedrt" bench allreduce --peers "$p" --size "$size" --iterations "$n" | sed "s/^/round $round: /" | tee -a "$out"
      mpirun --oversubscribe -np "$p" --mca btl tcp,self --mca btl_tcp_if_include lo \
        "$mpi_bench" --size "$size" --iterations "$n" | sed "s/^/round $round: /" | tee -a "$out"
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

# Summary: one round's p50 says little on a shared machine (OpenMPI's own
# moves by a third between rounds), so per size and process count the
# medians over rounds, their ratio, and each round's fedrt / OpenMPI ratio.
summarize() {
  sed -nE 's/^round ([0-9]+): (allreduce|MPI_Allreduce) fp32  peers ([0-9]+)  size ([0-9]+) bytes  iterations [0-9]+  p50 ([0-9.]+) ms.*/\4 \3 \1 \2 \5/p' "$out" |
    sort -k1,1n -k2,2n -k3,3n |
    awk '
      function median(a, n,   i, j, t) {
        for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
      }
      function flush(   nf, nm, i, ratios, r) {
        if (key == "") return
        nf = 0; nm = 0; ratios = ""
        for (i = 1; i <= rounds; i++) {
          if (!(i in f) || !(i in m)) continue
          ff[++nf] = f[i]; mm[++nm] = m[i]
          ratios = ratios sprintf(" %.2f", f[i] / m[i])
        }
        if (nf > 0) {
          r = median(ff, nf) / median(mm, nm)
          printf "%10s bytes, %s processes: p50 median fedrt %.3f ms, OpenMPI %.3f ms, ratio %.2f; per round%s\n",
                 size, peers, median(ff, nf), median(mm, nm), r, ratios
        }
        delete f; delete m; delete ff; delete mm; rounds = 0
      }
      { if ($1 " " $2 != key) { flush(); key = $1 " " $2; size = $1; peers = $2 }
        if ($3 > rounds) rounds = $3
        if ($4 == "allreduce") f[$3] = $5; else m[$3] = $5 }
      END { flush() }'
}
echo "summary over $rounds rounds:"
summarize
if (( BENCH_RECORD )); then
  # One row per run: the lines above, cut into their figures.
  sed -nE 's/^round ([0-9]+): (allreduce|MPI_Allreduce) fp32  peers ([0-9]+)  size ([0-9]+) bytes  iterations ([0-9]+)  p50 ([0-9.]+) ms  p99 ([0-9.]+) ms  bus bandwidth ([0-9.]+) GB\/s  cpu ([0-9.]+) ms.*/| \1 | \2 | \3 | \4 | \5 | \6 | \7 | \8 | \9 |/p' "$out" |
    sed 's/| allreduce |/| fedrt |/; s/| MPI_Allreduce |/| OpenMPI |/' |
    { echo "| round | implementation | processes | bytes | iterations | p50 ms | p99 ms | bus GB/s | CPU ms per all-reduce |"; cat; } |
    bench_record allreduce.md "Dense fp32 all-reduce, fedrt against OpenMPI (loopback TCP)" "$command" "$load_before" "$fedrt"
fi
