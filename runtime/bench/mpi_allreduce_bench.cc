// MPI_Allreduce reference for `fedrt bench allreduce` (a benchmark program,
// not part of the product; it needs an MPI implementation, fedrt does not).
//
// Times MPI_Allreduce(MPI_IN_PLACE, float32, MPI_SUM) exactly as
// `fedrt bench allreduce` times the ring: iterations / 10 (at least 3)
// warm-up calls, then `iterations` timed calls on rank 0, the vector refilled
// with 1.0 before each call (outside the timed region), no barrier between
// calls, p50 / p99 of rank 0's times, bus bandwidth = bytes * 2 (p - 1) / p
// / p50 (the NCCL tests' definition), and the CPU time (user + system, every
// thread) of all ranks summed, per call.
//
// Build (one line; or configure with -DFEDRT_BUILD_MPI_BENCH=ON):
//   mpicxx -O2 -std=c++17 runtime/bench/mpi_allreduce_bench.cc -o mpi_allreduce_bench
// Usage (OpenMPI over TCP on loopback, as fedrt runs):
//   mpirun --oversubscribe -np 4 --mca btl tcp,self --mca btl_tcp_if_include lo \
//     ./mpi_allreduce_bench --size 16777216 --iterations 20
// Expected output (one line, from rank 0):
//   MPI_Allreduce fp32  peers 4  size 16777216 bytes  iterations 20  p50 ... ms  p99 ... ms
//   bus bandwidth ... GB/s  cpu ... ms per all-reduce (all processes)
#include <mpi.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

double ProcessCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  unsigned long long bytes = 16ull << 20;
  int iterations = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--size") == 0) {
      bytes = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (std::strcmp(argv[i], "--iterations") == 0) {
      iterations = std::max(1, std::atoi(argv[i + 1]));
    } else {
      if (rank == 0) std::fprintf(stderr, "usage: mpi_allreduce_bench [--size BYTES] [--iterations N]\n");
      MPI_Finalize();
      return 2;
    }
  }
  const std::size_t n = static_cast<std::size_t>(bytes / sizeof(float));
  std::vector<float> data(n, 1.0f);
  std::vector<double> times;
  double cpu = 0;
  const int warmup = std::max(3, iterations / 10);  // as `fedrt bench allreduce`
  for (int i = 0; i < warmup + iterations; ++i) {
    std::fill(data.begin(), data.end(), 1.0f);
    const double cpu_start = ProcessCpuSeconds();
    const double start = MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    const double t = MPI_Wtime() - start;
    if (i >= warmup) {
      times.push_back(t);
      cpu += ProcessCpuSeconds() - cpu_start;
    }
  }
  int wrong = (n > 0 && data[n - 1] != static_cast<float>(size)) ? 1 : 0;
  int any_wrong = 0;
  MPI_Reduce(&wrong, &any_wrong, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD);
  double cpu_all = 0;
  MPI_Reduce(&cpu, &cpu_all, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::sort(times.begin(), times.end());
    auto pct = [&](double q) {
      return times[std::min(times.size() - 1, static_cast<std::size_t>(q * static_cast<double>(times.size())))];
    };
    const double p = static_cast<double>(size);
    const double p50 = pct(0.5), p99 = pct(0.99);
    const double bus = static_cast<double>(bytes) * 2.0 * (p - 1.0) / p / p50 / 1e9;
    std::printf("MPI_Allreduce fp32  peers %d  size %llu bytes  iterations %d  p50 %.3f ms  p99 %.3f ms  "
                "bus bandwidth %.3f GB/s  cpu %.3f ms per all-reduce (all processes)%s\n",
                size, bytes, iterations, p50 * 1e3, p99 * 1e3, bus, cpu_all / iterations * 1e3,
                any_wrong ? "  WRONG SUM" : "");
    std::fflush(stdout);
  }
  MPI_Finalize();
  return any_wrong ? 1 : 0;
}
