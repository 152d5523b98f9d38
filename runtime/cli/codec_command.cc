// `fedrt codec encode|decode|stats`: inspect and compare codecs on one's own
// data. Inputs are raw little-endian float32 files or float32 .npy files.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/float_files.h"
#include "cli/measure.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/payload.h"

namespace fedrt::cli {
namespace {

int Fail(const Status& status) {
  std::fprintf(stderr, "fedrt codec: %s\n", status.ToString().c_str());
  return status.code() == StatusCode::kInvalidArgument ? 2 : 1;
}

struct EncodeOptions {
  std::string codec, input, output;
  uint64_t seed = 0;
  uint32_t round = 0, sender = 0, tensor = 0;
};

struct DecodeOptions {
  std::string input, output, side_info;
  uint64_t seed = 0;
};

struct StatsOptions {
  std::string codec, input, side_info;
  uint64_t seed = 1;
  bool json = false;
};

Result<std::vector<float>> LoadSideInfo(const std::string& path, const Codec& codec, std::size_t d) {
  if (path.empty()) {
    if (codec.needs_side_info()) {
      return InvalidArgument(codec.spec() + " decodes with side information: pass --side-info FILE");
    }
    return std::vector<float>();
  }
  auto side = ReadFloatFile(path);
  FEDRT_RETURN_IF_ERROR(side.status());
  if (side->size() != d) {
    return InvalidArgument("--side-info " + path + " has " + std::to_string(side->size()) +
                           " floats, the vector has " + std::to_string(d));
  }
  return side;
}

int RunEncode(const EncodeOptions& o) {
  auto codec = MakeCodec(o.codec);
  if (!codec.ok()) return Fail(codec.status());
  auto input = ReadFloatFile(o.input);
  if (!input.ok()) return Fail(input.status());
  CodecContext context;
  context.session_seed = o.seed;
  context.round = o.round;
  context.sender_id = o.sender;
  context.tensor_id = o.tensor;
  std::vector<uint8_t> payload((*codec)->MaxEncodedSize(input->size()));
  auto size = (*codec)->Encode(input->data(), input->size(), context, payload.data(), payload.size());
  if (!size.ok()) return Fail(size.status());
  Status written = WriteBytes(o.output, payload.data(), *size);
  if (!written.ok()) return Fail(written);
  std::printf("%s: %zu floats -> %zu bytes (%.3f bits/coordinate)\n", (*codec)->spec().c_str(), input->size(),
              *size, MakeCodecStats(*size, input->size()).bits_per_coordinate);
  return 0;
}

int RunDecode(const DecodeOptions& o) {
  auto payload = ReadBytes(o.input);
  if (!payload.ok()) return Fail(payload.status());
  auto view = ParsePayload(payload->data(), payload->size());
  if (!view.ok()) return Fail(view.status());
  auto codec = MakeCodec(std::string(view->spec));
  if (!codec.ok()) return Fail(codec.status());
  if (view->header.d > (uint64_t{1} << 32)) return Fail(OutOfRange("payload claims more than 2^32 coordinates"));
  const std::size_t d = static_cast<std::size_t>(view->header.d);
  CodecContext context;
  context.session_seed = o.seed;
  context.round = view->header.round;
  context.sender_id = view->header.sender_id;
  context.tensor_id = view->header.tensor_id;
  auto side = LoadSideInfo(o.side_info, **codec, d);
  if (!side.ok()) return Fail(side.status());
  std::vector<float> output(d);
  Status decoded = (*codec)->Decode(payload->data(), payload->size(), context, output.data(), d,
                                    side->empty() ? nullptr : side->data());
  if (!decoded.ok()) return Fail(decoded);
  Status written = WriteFloatFile(o.output, output);
  if (!written.ok()) return Fail(written);
  std::printf("%s: %zu bytes -> %zu floats\n", std::string(view->spec).c_str(), payload->size(), d);
  return 0;
}

int RunStats(const StatsOptions& o) {
  auto codec = MakeCodec(o.codec);
  if (!codec.ok()) return Fail(codec.status());
  auto input = ReadFloatFile(o.input);
  if (!input.ok()) return Fail(input.status());
  const std::size_t d = input->size();
  auto side = LoadSideInfo(o.side_info, **codec, d);
  if (!side.ok()) return Fail(side.status());
  const float* side_info = side->empty() ? nullptr : side->data();
  CodecContext context;
  context.session_seed = o.seed;
  std::vector<uint8_t> payload((*codec)->MaxEncodedSize(d));
  std::vector<float> output(d);
  Status status;
  std::size_t size = 0;
  const double encode_s = SecondsPerCall([&] {
    auto r = (*codec)->Encode(input->data(), d, context, payload.data(), payload.size());
    if (r.ok()) size = *r; else status = r.status();
  }, 0.2, false);
  if (!status.ok()) return Fail(status);
  const double decode_s = SecondsPerCall([&] {
    Status s = (*codec)->Decode(payload.data(), size, context, output.data(), d, side_info);
    if (!s.ok()) status = s;
  }, 0.2, false);
  if (!status.ok()) return Fail(status);
  const double normalized_error = NormalizedError(output.data(), input->data(), d);
  const double bits = MakeCodecStats(size, d).bits_per_coordinate;
  const double bytes_in = 4.0 * static_cast<double>(d);
  if (o.json) {
    nlohmann::json j = {{"codec", (*codec)->spec()}, {"d", d}, {"payload_bytes", size},
                        {"bits_per_coordinate", bits}, {"normalized_error", normalized_error},
                        {"encode_gb_per_s", bytes_in / encode_s / 1e9}, {"decode_gb_per_s", bytes_in / decode_s / 1e9}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("codec:              %s\n", (*codec)->spec().c_str());
    std::printf("coordinates:        %zu\n", d);
    std::printf("payload:            %zu bytes (%.1fx smaller than fp32)\n", size, bytes_in / static_cast<double>(size));
    std::printf("bits/coordinate:    %.4f\n", bits);
    std::printf("normalized error:   %.6g  (||decode - x||^2 / ||x||^2)\n", normalized_error);
    std::printf("encode:             %.3f GB/s of float input\n", bytes_in / encode_s / 1e9);
    std::printf("decode:             %.3f GB/s\n", bytes_in / decode_s / 1e9);
  }
  return 0;
}

}  // namespace

void RegisterCodec(CLI::App& app, CommandList& commands) {
  CLI::App* codec = app.add_subcommand("codec", "Encode, decode and measure update codecs on your own data");
  codec->require_subcommand(1);

  auto encode_options = std::make_shared<EncodeOptions>();
  CLI::App* encode = codec->add_subcommand("encode", "Encode a float32 vector (raw or .npy) into a payload");
  encode->add_option("--codec", encode_options->codec, "Codec spec, e.g. dqsg:s=2,b=0")->required();
  encode->add_option("--seed", encode_options->seed, "Session seed shared with the decoder")->required();
  encode->add_option("--round", encode_options->round, "Round number")->required();
  encode->add_option("--sender", encode_options->sender, "Sender id")->required();
  encode->add_option("--tensor", encode_options->tensor, "Tensor id (default 0)");
  encode->add_option("IN", encode_options->input, "Input vector: raw little-endian float32, or .npy")->required();
  encode->add_option("OUT", encode_options->output, "Payload file to write")->required();
  commands.push_back({encode, [encode_options] { return RunEncode(*encode_options); }});

  auto decode_options = std::make_shared<DecodeOptions>();
  CLI::App* decode = codec->add_subcommand("decode", "Decode a payload (it names its codec) into float32");
  decode->add_option("--seed", decode_options->seed, "Session seed the payload was encoded with")->required();
  decode->add_option("--side-info", decode_options->side_info,
                     "Receiver's side information (NDQSG running mean, Moniqua own model)");
  decode->add_option("IN", decode_options->input, "Payload file")->required();
  decode->add_option("OUT", decode_options->output, "Output vector (.npy or raw float32)")->required();
  commands.push_back({decode, [decode_options] { return RunDecode(*decode_options); }});

  auto stats_options = std::make_shared<StatsOptions>();
  CLI::App* stats = codec->add_subcommand("stats", "Bits per coordinate, normalized error and throughput of a codec");
  stats->add_option("--codec", stats_options->codec, "Codec spec")->required();
  stats->add_option("--seed", stats_options->seed, "Session seed (default 1)");
  stats->add_option("--side-info", stats_options->side_info, "Side information for codecs that need it");
  stats->add_flag("--json", stats_options->json, "One JSON object instead of text");
  stats->add_option("IN", stats_options->input, "Input vector: raw little-endian float32, or .npy")->required();
  commands.push_back({stats, [stats_options] { return RunStats(*stats_options); }});
}

}  // namespace fedrt::cli
