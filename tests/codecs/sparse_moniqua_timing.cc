// Quick timing of the sparsifier and Moniqua hot paths, per kernel ISA (not
// a test; prints a table). Usage: codecs_sparse_moniqua_timing [log2 d]
// Reports the best of 5 runs in thread CPU time (CLOCK_THREAD_CPUTIME_ID), so
// time the thread spends descheduled on a busy machine does not count.
#include <algorithm>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/moniqua.h"
#include "fedrt/platform/cpu.h"
#include "moniqua/moniqua_kernels.h"
#include "sparse/sparse_select.h"
#include "symbols/symbol_coding.h"

namespace {

template <typename F>
double BestSeconds(F f, int reps = 5) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    timespec t0, t1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    f();
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
    best = std::min(best, static_cast<double>(t1.tv_sec - t0.tv_sec) + 1e-9 * static_cast<double>(t1.tv_nsec - t0.tv_nsec));
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fedrt;
  const int log2d = argc > 1 ? std::atoi(argv[1]) : 24;
  const std::size_t d = std::size_t{1} << log2d;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  std::vector<float> x(d), y(d), out(d);
  for (std::size_t i = 0; i < d; ++i) {
    x[i] = normal(rng);
    y[i] = x[i] + 0.01f * normal(rng);
  }
  const double mb = 4.0 * static_cast<double>(d) / 1e6;
  CodecContext context;
  context.session_seed = 5;
  std::printf("d = 2^%d floats (%.1f MB)\n", log2d, mb);
  for (Isa isa : AvailableIsas()) {
    if (!SetIsaOverride(isa)) continue;
    const std::size_t k = d / 100;
    std::vector<uint32_t> indices(k);
    const double select = BestSeconds([&] {
      auto t = codec_internal::FindMagnitudeThreshold(x.data(), d, k, indices.data(), k);
      codec_internal::CollectTop(x.data(), d, *t, indices.data());
    });
    std::printf("%-6s topk select k=1%%, three-pass radix select: %8.1f M floats/s\n", IsaName(isa), static_cast<double>(d) / select / 1e6);
    std::vector<uint32_t> work(3 * k);
    bool one_pass = false;
    const double candidates = BestSeconds([&] {
      one_pass = *codec_internal::SelectTopByCandidates(x.data(), d, k, work.data(), work.size());
    });
    std::printf("%-6s topk select k=1%%, one pass over candidates: %8.1f M floats/s%s\n", IsaName(isa),
                static_cast<double>(d) / candidates / 1e6, one_pass ? "" : " (fell back)");
    const SparseKernels& kernels = SparseKernelsFor(isa);
    std::vector<uint32_t> hist(4 * kMagnitudeBins);
    const double h1 = BestSeconds([&] { kernels.magnitude_histogram(x.data(), d, hist.data()); });
    const double h2 = BestSeconds([&] { kernels.prefix_histogram(x.data(), d, 0x402, 9, 11, hist.data()); });
    const double ha = BestSeconds([&] { kernels.histogram_above(x.data(), d, 0x40200000u, hist.data()); });
    const double vb = BestSeconds([&] { kernels.values_in_bin(x.data(), d, 0x402, indices.data()); });
    std::printf("%-6s   histogram above 2.5: %.1f ms, values in bin: %.1f ms\n", IsaName(isa), ha * 1e3, vb * 1e3);
    auto t = codec_internal::FindMagnitudeThreshold(x.data(), d, k);
    const double c = BestSeconds([&] {
      std::size_t ties = t->ties;
      kernels.collect_above(x.data(), d, 0, t->bits, &ties, indices.data());
    });
    std::printf("%-6s   passes: histogram %.1f ms, prefix histogram %.1f ms, collect %.1f ms\n", IsaName(isa),
                h1 * 1e3, h2 * 1e3, c * 1e3);
    {
      const MoniquaKernels& mk = MoniquaKernelsFor(isa);
      std::vector<uint8_t> symbols(d), packed(d);
      const double q = BestSeconds([&] { mk.quantize(x.data(), d, 0.4f, 1, nullptr, symbols.data()); });
      uint16_t flags = 0;
      const double pk = BestSeconds([&] {
        (void)codec_internal::EncodeSymbols(symbols.data(), d, 2, codec_internal::SymbolCoding::kPack, packed.data(),
                                            packed.size(), &flags);
      });
      const double up = BestSeconds([&] {
        (void)codec_internal::DecodeSymbols(packed.data(), d / 8, d, 2, flags, symbols.data());
      });
      const double rc = BestSeconds([&] { mk.recover(symbols.data(), d, 0.4f, 1, y.data(), 0.2f, out.data()); });
      std::printf("%-6s   moniqua 1 bit: quantize %.1f ms, pack %.1f ms, unpack %.1f ms, recover %.1f ms\n",
                  IsaName(isa), q * 1e3, pk * 1e3, up * 1e3, rc * 1e3);
    }
    for (const char* spec : {"topk:k=0.01", "rtopk:k=0.01,r=0.04", "randk:k=0.01", "moniqua:theta=0.1,bits=1",
                             "moniqua:theta=0.1,bits=8", "moniqua:theta=0.1,bits=4,round=stochastic"}) {
      auto made = MakeCodec(spec);
      std::unique_ptr<Codec> codec = std::move(made.value());
      std::vector<uint8_t> payload(codec->MaxEncodedSize(d));
      std::size_t size = 0;
      const double enc = BestSeconds([&] {
        size = *codec->Encode(x.data(), d, context, payload.data(), payload.size());
      });
      const float* side = codec->needs_side_info() ? y.data() : nullptr;
      const double dec = BestSeconds([&] {
        if (!codec->Decode(payload.data(), size, context, out.data(), d, side).ok()) std::abort();
      });
      std::printf("%-6s %-42s encode %6.2f GB/s  decode %6.2f GB/s  %.3f bits/coordinate\n", IsaName(isa), spec,
                  mb / 1e3 / enc, mb / 1e3 / dec, 8.0 * static_cast<double>(size) / static_cast<double>(d));
    }
  }
  std::vector<float> copy(d);
  const double memcpy_s = BestSeconds([&] { std::copy(x.begin(), x.end(), copy.begin()); });
  std::printf("memcpy %.2f GB/s\n", mb / 1e3 / memcpy_s);
  return 0;
}
