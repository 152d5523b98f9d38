// The codec registry: the one list of every codec MakeCodec knows. A new codec
// adds its factory here (one line, and its name to FEDRT_ALL_CODECS in
// codecs/CMakeLists.txt) and nowhere else; the CLI, the benchmarks and the
// registry tests iterate this list.
//
// FEDRT_CODECS (configure time) chooses which entries exist: each name is
// compiled in when FEDRT_CODEC_<NAME> is 1, so a firmware image links only
// the factories (and through them the kernels) of the codecs it asks for.
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

// Every codec name fedrt has, built here or not: a spec naming one this build
// left out gets a message that says so rather than "unknown codec".
constexpr const char* kAllCodecNames[] = {"fp32", "qsgd", "terngrad", "sign", "alq", "amq", "fp16",
                                          "bf16", "dqsg", "ndqsg", "topk", "randk", "rtopk", "moniqua"};

constexpr RegisteredCodec kCodecs[] = {
#if FEDRT_CODEC_FP32
    {"fp32", &MakeFp32Codec},
#endif
#if FEDRT_CODEC_QSGD
    {"qsgd", &MakeQsgdCodec},
#endif
#if FEDRT_CODEC_TERNGRAD
    {"terngrad", &MakeTernGradCodec},
#endif
#if FEDRT_CODEC_SIGN
    {"sign", &MakeSignCodec},
#endif
#if FEDRT_CODEC_ALQ
    {"alq", &MakeAlqCodec},
#endif
#if FEDRT_CODEC_AMQ
    {"amq", &MakeAmqCodec},
#endif
#if FEDRT_CODEC_FP16
    {"fp16", &MakeFp16Codec},
#endif
#if FEDRT_CODEC_BF16
    {"bf16", &MakeBf16Codec},
#endif
#if FEDRT_CODEC_DQSG
    {"dqsg", &MakeDqsgCodec},
#endif
#if FEDRT_CODEC_NDQSG
    {"ndqsg", &MakeNdqsgCodec},
#endif
#if FEDRT_CODEC_TOPK
    {"topk", &MakeTopKCodec},
#endif
#if FEDRT_CODEC_RANDK
    {"randk", &MakeRandKCodec},
#endif
#if FEDRT_CODEC_RTOPK
    {"rtopk", &MakeRTopKCodec},
#endif
#if FEDRT_CODEC_MONIQUA
    {"moniqua", &MakeMoniquaCodec},
#endif
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
  for (const char* name : kAllCodecNames) {
    if (spec->name() == name) {
      return Unsupported("codec '" + spec->name() + "' is not in this build (configured with FEDRT_CODECS=" + names +
                         ")");
    }
  }
  return InvalidArgument("unknown codec '" + spec->name() + "' (known: " + names + ")");
}

std::vector<std::string> CodecNames() {
  std::vector<std::string> names;
  for (const RegisteredCodec& codec : kCodecs) names.emplace_back(codec.name);
  return names;
}

}  // namespace fedrt
