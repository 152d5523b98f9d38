// The codec registry: the one list of every codec MakeCodec knows. A new codec
// adds its factory here (one line) and nowhere else; the CLI, the benchmarks
// and the registry tests iterate this list.
#include <cstring>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/codec_spec.h"
#include "dqsg/dqsg_codec.h"
#include "fp32/fp32_codec.h"
#include "qsgd/qsgd_codecs.h"
#include "half/half_codec.h"
#include "moniqua/moniqua_codec.h"
#include "sparse/sparse_codecs.h"

namespace fedrt {
namespace {

using CodecFactory = Result<std::unique_ptr<Codec>> (*)(const CodecSpec& spec);

struct RegisteredCodec {
  const char* name;
  CodecFactory factory;
};

constexpr RegisteredCodec kCodecs[] = {
    {"fp32", &MakeFp32Codec},
    {"qsgd", &MakeQsgdCodec},
    {"terngrad", &MakeTernGradCodec},
    {"sign", &MakeSignCodec},
    {"alq", &MakeAlqCodec},
    {"amq", &MakeAmqCodec},
    {"fp16", &MakeFp16Codec},
    {"bf16", &MakeBf16Codec},
    {"dqsg", &MakeDqsgCodec},
    {"ndqsg", &MakeNdqsgCodec},
    {"topk", &MakeTopKCodec},
    {"randk", &MakeRandKCodec},
    {"rtopk", &MakeRTopKCodec},
    {"moniqua", &MakeMoniquaCodec},
};

}  // namespace

Result<std::unique_ptr<Codec>> MakeCodec(const std::string& text) {
  auto spec = CodecSpec::Parse(text);
  FEDRT_RETURN_IF_ERROR(spec.status());
  std::string names;
  for (const RegisteredCodec& codec : kCodecs) {
    if (spec->name() == codec.name) return codec.factory(*spec);
    names += (names.empty() ? "" : ", ") + std::string(codec.name);
  }
  return InvalidArgument("unknown codec '" + spec->name() + "' (known: " + names + ")");
}

std::vector<std::string> CodecNames() {
  std::vector<std::string> names;
  for (const RegisteredCodec& codec : kCodecs) names.emplace_back(codec.name);
  return names;
}

}  // namespace fedrt
