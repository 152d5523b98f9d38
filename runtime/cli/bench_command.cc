// `fedrt bench codecs`: encode/decode throughput, bits per coordinate and
// normalized error of every registered codec on every ISA this CPU has, on
// synthetic Gaussian and Laplace vectors (and a user's saved gradients), with
// memcpy on the same machine as the ceiling. One core; a benchmark, not a test.
//
// With zstd in the build (FEDRT_WITH_ZSTD), every rANS row is followed by
// zstd levels 1 and 3 on the same symbols, as a yardstick for rate and speed:
// the codec with `ec=none` writes its symbols one byte each at the end of its
// payload, zstd compresses those bytes, and the row's times are the codec's
// plus zstd's (encode: quantize, then compress; decode: decompress, then
// dequantize), so they compare with the rANS row's directly.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cli/bench_record.h"
#include "cli/commands.h"
#include "cli/float_files.h"
#include "cli/measure.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/codec_spec.h"
#include "fedrt/platform/cpu.h"

#if FEDRT_BENCH_ZSTD
#include <zstd.h>
#endif

namespace fedrt::cli {
namespace {

// Representative settings per codec; codecs not in this build's registry are skipped.
const char* const kBenchSpecs[] = {
    "fp32", "fp16", "bf16", "qsgd", "qsgd:ec=pack", "terngrad", "sign", "dqsg", "dqsg:ec=pack", "ndqsg",
    "ndqsg:ec=pack", "alq", "amq", "topk:k=0.01", "randk:k=0.01", "rtopk:k=0.01,r=0.05",
    "moniqua:bits=1,theta=0.5", "moniqua:bits=4,theta=0.5",
};

struct BenchOptions {
  bool json = false;
  bool quick = false;
  std::string input;
  std::vector<std::string> codecs;  // empty: all
  double min_seconds = 0.15;
  bool cpu_time = false;  // thread CPU time instead of wall-clock time
  std::string record;     // a markdown file the results are appended to (bench_record.h)
};

struct Vector {
  std::string name;
  std::vector<float> values;
  std::vector<float> side_info;  // the receiver's nearby copy, for NDQSG and Moniqua
};

std::vector<float> Synthetic(const std::string& distribution, std::size_t d, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(d);
  if (distribution == "gaussian") {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& x : v) x = normal(rng);
  } else {  // laplace, unit scale: heavy tails like real gradients
    std::exponential_distribution<float> exponential(1.0f);
    std::bernoulli_distribution sign(0.5);
    for (float& x : v) x = sign(rng) ? exponential(rng) : -exponential(rng);
  }
  return v;
}

// A receiver-side copy that differs from the vector by 1% of its RMS.
std::vector<float> NearbyCopy(const std::vector<float>& v) {
  double energy = 0;
  for (float x : v) energy += double{x} * x;
  const float rms = v.empty() ? 0.0f : static_cast<float>(std::sqrt(energy / static_cast<double>(v.size())));
  std::mt19937 rng(99);
  std::normal_distribution<float> noise(0.0f, 0.01f * rms);
  std::vector<float> side(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) side[i] = v[i] + noise(rng);
  return side;
}

struct Row {
  std::string codec, isa, vector;
  std::size_t d = 0;
  double encode_gbs = 0, decode_gbs = 0, bits = 0, error = 0;
  std::string failure;
};

// Seconds per call of `work` (after a warm-up call), wall-clock or thread CPU time.
template <typename Work>
double TimePerCall(Work work, double min_seconds, bool cpu_time) {
  return cpu_time ? CpuSecondsPerCall(work, min_seconds, true) : SecondsPerCall(work, min_seconds, true);
}

// A row for `codec` on `vector`, and the context every measurement encodes with.
Row NewRow(const std::string& codec, const Vector& vector) {
  Row row;
  row.codec = codec;
  row.vector = vector.name;
  row.d = vector.values.size();
  return row;
}
CodecContext BenchContext() {
  CodecContext context;
  context.session_seed = 7;
  return context;
}

Row Measure(Codec& codec, const Vector& vector, double min_seconds, bool cpu_time) {
  Row row = NewRow(codec.spec(), vector);
  const std::size_t d = row.d;
  const CodecContext context = BenchContext();
  std::vector<uint8_t> payload(codec.MaxEncodedSize(d));
  std::vector<float> out(d);
  const float* side = codec.needs_side_info() ? vector.side_info.data() : nullptr;
  Status status;
  std::size_t size = 0;
  const double enc = TimePerCall([&] {
    auto r = codec.Encode(vector.values.data(), d, context, payload.data(), payload.size());
    if (r.ok()) size = *r; else status = r.status();
  }, min_seconds, cpu_time);
  if (status.ok()) {
    const double dec = TimePerCall([&] {
      Status s = codec.Decode(payload.data(), size, context, out.data(), d, side);
      if (!s.ok()) status = s;
    }, min_seconds, cpu_time);
    row.decode_gbs = 4.0 * static_cast<double>(d) / dec / 1e9;
  }
  if (!status.ok()) {
    row.failure = status.ToString();
    return row;
  }
  row.encode_gbs = 4.0 * static_cast<double>(d) / enc / 1e9;
  row.bits = MakeCodecStats(size, d).bits_per_coordinate;
  row.error = NormalizedError(out.data(), vector.values.data(), d);
  return row;
}

#if FEDRT_BENCH_ZSTD
// The `ec=none` codec of `none` (see the file comment) with zstd at `level`
// on its symbol bytes: the last `d` bytes of the payload.
Row MeasureZstd(Codec& none, int level, const Vector& vector, double min_seconds, bool cpu_time) {
  Row row = NewRow(none.spec(), vector);
  const std::size_t at = row.codec.find("ec=none");
  if (at != std::string::npos) row.codec.replace(at, 7, "ec=zstd-" + std::to_string(level));
  const std::size_t d = row.d;
  const CodecContext context = BenchContext();
  std::vector<uint8_t> payload(none.MaxEncodedSize(d));
  std::vector<uint8_t> compressed(ZSTD_compressBound(d));
  std::vector<float> out(d);
  const float* side = none.needs_side_info() ? vector.side_info.data() : nullptr;
  auto first = none.Encode(vector.values.data(), d, context, payload.data(), payload.size());
  if (!first.ok() || *first < d) {
    row.failure = first.ok() ? "payload shorter than its symbols" : first.status().ToString();
    return row;
  }
  const std::size_t prefix = *first - d;  // header, spec and scales
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  std::size_t zsize = 0;
  const double enc = TimePerCall([&] {
    auto r = none.Encode(vector.values.data(), d, context, payload.data(), payload.size());
    if (!r.ok()) row.failure = r.status().ToString();
    zsize = ZSTD_compressCCtx(cctx, compressed.data(), compressed.size(), payload.data() + prefix, d, level);
    if (ZSTD_isError(zsize)) row.failure = ZSTD_getErrorName(zsize);
  }, min_seconds, cpu_time);
  // The prefix is in place (it comes before the symbols in any payload); the
  // timed part is decompression into place and the codec's decode.
  std::vector<uint8_t> restored(payload.begin(), payload.begin() + static_cast<std::ptrdiff_t>(*first));
  const double dec = TimePerCall([&] {
    const std::size_t n = ZSTD_decompressDCtx(dctx, restored.data() + prefix, d, compressed.data(), zsize);
    if (ZSTD_isError(n) || n != d) row.failure = "zstd: decompressed size differs";
    Status st = none.Decode(restored.data(), restored.size(), context, out.data(), d, side);
    if (!st.ok()) row.failure = st.ToString();
  }, min_seconds, cpu_time);
  ZSTD_freeCCtx(cctx);
  ZSTD_freeDCtx(dctx);
  if (!row.failure.empty()) return row;
  row.encode_gbs = 4.0 * static_cast<double>(d) / enc / 1e9;
  row.decode_gbs = 4.0 * static_cast<double>(d) / dec / 1e9;
  row.bits = MakeCodecStats(prefix + zsize, d).bits_per_coordinate;
  row.error = NormalizedError(out.data(), vector.values.data(), d);
  return row;
}
#endif

double MemcpyGbs(std::size_t d, double min_seconds, bool cpu_time) {
  std::vector<float> a(d, 1.0f), b(d);
  const auto copy = [&] {
    std::memcpy(b.data(), a.data(), 4 * d);
    // Keep the copy observable so it is not optimised away.
    if (b[d / 2] != 1.0f) std::abort();
  };
  const double s = TimePerCall(copy, min_seconds, cpu_time);
  return 4.0 * static_cast<double>(d) / s / 1e9;
}

int RunBenchCodecs(const BenchOptions& o) {
  std::vector<std::size_t> sizes = o.quick ? std::vector<std::size_t>{1u << 16, 1u << 20}
                                           : std::vector<std::size_t>{1u << 16, 1u << 20, 1u << 24};
  std::vector<std::string> specs;
  const std::vector<std::string> registered = CodecNames();
  // Every --codec must name a codec or be a valid spec, before anything runs.
  for (const std::string& wanted : o.codecs) {
    if (std::find(registered.begin(), registered.end(), wanted) != registered.end()) continue;
    auto codec = MakeCodec(wanted);
    if (!codec.ok()) {
      std::fprintf(stderr, "fedrt bench codecs: --codec %s: %s\n", wanted.c_str(), codec.status().ToString().c_str());
      return 2;
    }
  }
  for (const char* spec : kBenchSpecs) {
    auto parsed = CodecSpec::Parse(spec);
    if (!parsed.ok() || std::find(registered.begin(), registered.end(), parsed->name()) == registered.end()) continue;
    if (!o.codecs.empty() && std::find(o.codecs.begin(), o.codecs.end(), parsed->name()) == o.codecs.end() &&
        std::find(o.codecs.begin(), o.codecs.end(), std::string(spec)) == o.codecs.end()) {
      continue;
    }
    specs.emplace_back(spec);
  }
  for (const std::string& extra : o.codecs) {  // user specs not in the table
    if (extra.find(':') != std::string::npos && std::find(specs.begin(), specs.end(), extra) == specs.end()) {
      specs.push_back(extra);
    }
  }

  std::vector<Vector> vectors;
  for (std::size_t d : sizes) {
    for (const char* distribution : {"gaussian", "laplace"}) {
      Vector v;
      v.values = Synthetic(distribution, d, 1);
      v.name = std::string(distribution) + "-2^" + std::to_string(static_cast<int>(std::log2(static_cast<double>(d))));
      v.side_info = NearbyCopy(v.values);
      vectors.push_back(std::move(v));
    }
  }
  if (!o.input.empty()) {
    auto values = ReadFloatFile(o.input);
    if (!values.ok()) {
      std::fprintf(stderr, "fedrt bench: %s\n", values.status().ToString().c_str());
      return 1;
    }
    Vector v;
    v.name = o.input;
    v.values = std::move(*values);
    v.side_info = NearbyCopy(v.values);
    vectors.push_back(std::move(v));
  }

  nlohmann::json results = nlohmann::json::array();
  BenchRecord record;
  record.title = std::string("fedrt bench codecs (") + (o.cpu_time ? "thread CPU" : "wall-clock") + " time, one core)";
  record.load_before = LoadAverage();
  record.columns = {"codec", "isa", "vector", "enc GB/s", "dec GB/s", "bits/coord", "norm. error"};
  const auto fixed = [](double value, int digits) {
    char text[32];
    std::snprintf(text, sizeof text, "%.*f", digits, value);
    return std::string(text);
  };
  const std::size_t memcpy_d = sizes.back();
  const double memcpy_gbs = MemcpyGbs(memcpy_d, o.min_seconds, o.cpu_time);
  if (!o.json) {
    std::printf("memcpy: %.2f GB/s (%zu floats, one core, %s time): the ceiling for every row below\n\n", memcpy_gbs,
                memcpy_d, o.cpu_time ? "thread CPU" : "wall-clock");
#if FEDRT_BENCH_ZSTD
    std::printf("ec=zstd-N rows: the ec=none codec plus zstd level N (%s) on its symbol bytes, beside the rANS\n"
                "row above them: a yardstick, not a codec\n\n", ZSTD_versionString());
#endif
    std::printf("%-34s %-6s %-15s %9s %9s %10s %12s\n", "codec", "isa", "vector", "enc GB/s", "dec GB/s",
                "bits/coord", "norm. error");
  }
  int failures = 0;
  // ISAs innermost: the rows to compare are measured back to back, so a
  // change in the machine's load hits both alike.
  for (const std::string& spec : specs) {
    auto codec = MakeCodec(spec);
    if (!codec.ok()) {
      std::fprintf(stderr, "fedrt bench: %s: %s\n", spec.c_str(), codec.status().ToString().c_str());
      ++failures;
      continue;
    }
    // The zstd yardstick of a rANS codec (see the file comment).
    std::unique_ptr<Codec> none;
#if FEDRT_BENCH_ZSTD
    const std::size_t rans = (*codec)->spec().view().find("ec=rans");
    if (rans != std::string::npos) {
      std::string none_spec = (*codec)->spec();
      none_spec.replace(rans, 7, "ec=none");
      auto made = MakeCodec(none_spec);
      if (made.ok()) none = std::move(*made);
    }
#endif
    for (const Vector& vector : vectors) {
      for (Isa isa : AvailableIsas()) {
        SetIsaOverride(isa);
        std::vector<Row> rows = {Measure(**codec, vector, o.min_seconds, o.cpu_time)};
#if FEDRT_BENCH_ZSTD
        for (int level : {1, 3}) {
          if (none) rows.push_back(MeasureZstd(*none, level, vector, o.min_seconds, o.cpu_time));
        }
#endif
        for (Row& row : rows) {
          row.isa = IsaName(isa);
          if (!row.failure.empty()) ++failures;
          if (row.failure.empty()) {
            char error[32];
            std::snprintf(error, sizeof error, "%.4g", row.error);
            record.rows.push_back({row.codec, row.isa, row.vector, fixed(row.encode_gbs, 3), fixed(row.decode_gbs, 3),
                                   fixed(row.bits, 4), error});
          } else {
            record.rows.push_back({row.codec, row.isa, row.vector, "failed: " + row.failure, "", "", ""});
          }
          if (o.json) {
            results.push_back({{"codec", row.codec}, {"isa", row.isa}, {"vector", row.vector}, {"d", row.d},
                               {"encode_gb_per_s", row.encode_gbs}, {"decode_gb_per_s", row.decode_gbs},
                               {"bits_per_coordinate", row.bits}, {"normalized_error", row.error},
                               {"error", row.failure}});
          } else if (!row.failure.empty()) {
            std::printf("%-34s %-6s %-15s failed: %s\n", row.codec.c_str(), row.isa.c_str(), row.vector.c_str(),
                        row.failure.c_str());
          } else {
            std::printf("%-34s %-6s %-15s %9.3f %9.3f %10.4f %12.4g\n", row.codec.c_str(), row.isa.c_str(),
                        row.vector.c_str(), row.encode_gbs, row.decode_gbs, row.bits, row.error);
          }
          std::fflush(stdout);
        }
      }
    }
  }
  ClearIsaOverride();
  if (o.json) {
    nlohmann::json doc = {{"memcpy_gb_per_s", memcpy_gbs}, {"cpu", DetectCpu().model}, {"rows", results}};
    std::printf("%s\n", doc.dump(1).c_str());
  }
  if (!o.record.empty()) {
    record.rows.insert(record.rows.begin(), {"memcpy (the ceiling)", "", std::to_string(memcpy_d) + " floats",
                                             fixed(memcpy_gbs, 2), "", "", ""});
    const Status written = AppendBenchRecord(o.record, record);
    if (!written.ok()) {
      std::fprintf(stderr, "fedrt bench codecs: --record: %s\n", written.ToString().c_str());
      return 1;
    }
    std::fprintf(stderr, "recorded in %s\n", o.record.c_str());
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

void RegisterBench(CLI::App& app, CommandList& commands) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks (codecs; all-reduce with the peer topology)");
  bench->require_subcommand(1);
  auto options = std::make_shared<BenchOptions>();
  CLI::App* codecs = bench->add_subcommand("codecs", "Throughput, bits/coordinate and error of every codec and ISA");
  codecs->add_flag("--json", options->json, "Print one JSON document instead of a table");
  codecs->add_flag("--quick", options->quick, "Sizes 2^16 and 2^20 only (default adds 2^24)");
  codecs->add_option("--input", options->input, "Also measure on this vector (raw float32 or .npy), e.g. saved gradients");
  codecs->add_option("--codec", options->codecs, "Only these codec names or specs (repeatable)");
  codecs->add_option("--min-time", options->min_seconds, "Seconds per measurement (default 0.15)");
  codecs->add_option("--record", options->record,
                     "Also append the results as a dated markdown section to this file (e.g. docs/benchmarks/codecs.md)");
  codecs->add_flag("--cpu-time", options->cpu_time,
                   "Time with the thread's CPU clock instead of the wall clock (steadier on a shared machine)");
  commands.push_back({codecs, [options] { return RunBenchCodecs(*options); }});
}

}  // namespace fedrt::cli
