// Throughput of the DQSG / NDQSG / fp16 / bf16 codecs and their kernels, per
// ISA, on 2^20 Gaussian floats, one thread. GB/s are bytes of float input
// (encode) or float output (decode) per second; best of several repetitions.
//
// Usage: codecs_dqsg_bench [d]
// Expected output: one line per (ISA, item): GB/s and, for codecs, bits per
// coordinate; then memcpy GB/s on the same machine as the ceiling.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dqsg/dqsg_kernels.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/philox.h"
#include "fedrt/platform/cpu.h"
#include "half/half_kernels.h"

namespace fedrt {
namespace {

// Best seconds per call of `fn` over repetitions lasting at least ~0.3 s.
template <typename Fn>
double BestSeconds(Fn fn) {
  double best = 1e30, total = 0;
  for (int rep = 0; rep < 200 && (rep < 3 || total < 0.3); ++rep) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = seconds < best ? seconds : best;
    total += seconds;
  }
  return best;
}

void Report(const char* isa, const std::string& what, double bytes, double seconds, double bits = -1) {
  if (bits >= 0) {
    std::printf("%-7s %-34s %8.3f GB/s  %6.3f bits/coord\n", isa, what.c_str(), bytes / seconds / 1e9, bits);
  } else {
    std::printf("%-7s %-34s %8.3f GB/s\n", isa, what.c_str(), bytes / seconds / 1e9);
  }
}

int Run(std::size_t d) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> w(d), u(d), out(d), side(d);
  for (float& x : w) x = normal(rng);
  for (std::size_t i = 0; i < d; ++i) side[i] = w[i] * 0.99f;
  RandomStream stream;
  stream.seed = 7;
  PhiloxDither(stream, 0, d, u.data());
  std::vector<uint8_t> symbols(d);
  std::vector<uint16_t> halves(d);
  const double bytes = 4.0 * static_cast<double>(d);
  std::printf("d = %zu floats, CPU: %s\n", d, DetectCpu().model.c_str());
  for (Isa isa : AvailableIsas()) {
    const char* name = IsaName(isa);
    SetIsaOverride(isa);
    const DqsgKernels& k = DqsgKernelsFor(isa);
    const float scale = k.max_abs(w.data(), d) / 2.0f;
    Report(name, "kernel max_abs", bytes, BestSeconds([&] { volatile float m = k.max_abs(w.data(), d); (void)m; }));
    Report(name, "kernel philox dither", bytes, BestSeconds([&] { PhiloxDither(stream, 0, d, u.data()); }));
    Report(name, "kernel quantize (s=2)", bytes,
           BestSeconds([&] { k.quantize(w.data(), u.data(), d, scale, 2, symbols.data()); }));
    Report(name, "kernel dequantize (s=2)", bytes,
           BestSeconds([&] { k.dequantize(symbols.data(), u.data(), d, scale, 2, out.data()); }));
    Report(name, "kernel dequantize+accumulate", bytes,
           BestSeconds([&] { k.dequantize_accumulate(symbols.data(), u.data(), d, scale, 2, 0.5f, out.data()); }));
    const HalfKernels& h = HalfKernelsFor(isa);
    Report(name, "kernel float->fp16", bytes, BestSeconds([&] { h.float_to_fp16(w.data(), d, halves.data()); }));
    Report(name, "kernel float->bf16", bytes, BestSeconds([&] { h.float_to_bf16(w.data(), d, halves.data()); }));
    for (const char* spec : {"dqsg:s=2,ec=pack", "dqsg:s=2,ec=rans", "dqsg:s=2,ec=none", "ndqsg:ec=pack",
                             "ndqsg:ec=rans", "fp16", "bf16"}) {
      auto codec = MakeCodec(spec);
      if (!codec.ok()) return 1;
      std::vector<uint8_t> payload((*codec)->MaxEncodedSize(d));
      CodecContext context;
      context.session_seed = 3;
      std::size_t size = 0;
      const double encode = BestSeconds([&] {
        size = *(*codec)->Encode(w.data(), d, context, payload.data(), payload.size());
      });
      const float* y = (*codec)->needs_side_info() ? side.data() : nullptr;
      const double decode = BestSeconds([&] {
        if (!(*codec)->Decode(payload.data(), size, context, out.data(), d, y).ok()) std::abort();
      });
      const double bits = 8.0 * static_cast<double>(size) / static_cast<double>(d);
      Report(name, std::string(spec) + " encode", bytes, encode, bits);
      Report(name, std::string(spec) + " decode", bytes, decode);
    }
  }
  ClearIsaOverride();
  std::vector<float> copy(d);
  Report("-", "memcpy", bytes, BestSeconds([&] { std::memcpy(copy.data(), w.data(), d * sizeof(float)); }));
  return 0;
}

}  // namespace
}  // namespace fedrt

int main(int argc, char** argv) {
  const std::size_t d = argc > 1 ? static_cast<std::size_t>(std::strtoull(argv[1], nullptr, 10)) : (1u << 20);
  return fedrt::Run(d);
}
