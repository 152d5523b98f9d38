// The codec registry: the one list of every codec MakeCodec knows. A new codec
// adds its factory here (one line, and its name to FEDRT_ALL_CODECS in
// codecs/CMakeLists.txt) and nowhere else; the CLI, the benchmarks and the
// registry tests iterate this list.
//
// FEDRT_CODECS (configure time) chooses which entries exist: each name is
// compiled in when FEDRT_CODEC_<NAME> is 1, so a firmware image links only
// the factories (and through them the kernels) of the codecs it asks for.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>

#include "fedrt/codecs/adaptive.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/codec_spec.h"
#include "common/codec_common.h"
#include "dqsg/dqsg_codec.h"
#include "fp32/fp32_codec.h"
#include "qsgd/qsgd_codecs.h"
#include "half/half_codec.h"
#include "moniqua/moniqua_codec.h"
#include "sparse/sparse_codecs.h"
#include "fedrt/platform/concat.h"

namespace fedrt {
namespace {

using codec_internal::CodecSlot;

// Builds the codec for `spec` where `slot` says (see codec_common.h).
using CodecFactory = Status (*)(const CodecSpec& spec, CodecSlot* slot);

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

// Parses `text` and builds its codec in `slot`.
Status Build(std::string_view text, CodecSlot* slot) {
  auto spec = CodecSpec::Parse(text);
  FEDRT_RETURN_IF_ERROR(spec.status());
  for (const RegisteredCodec& codec : kCodecs) {
    if (spec->name() == codec.name) return codec.factory(*spec, slot);
  }
  std::string names;
  for (const RegisteredCodec& codec : kCodecs) names += (names.empty() ? "" : ", ") + std::string(codec.name);
  for (const char* name : kAllCodecNames) {
    if (spec->name() == name) {
      return Unsupported("codec '" + std::string(spec->name()) + "' is not in this build (configured with FEDRT_CODECS=" +
                         names + ")");
    }
  }
  return InvalidArgument("unknown codec '" + std::string(spec->name()) + "' (known: " + names + ")");
}

// The working space starts at the first max_align_t boundary after the object.
std::size_t WorkspaceOffset(std::size_t object_size) {
  constexpr std::size_t kAlign = alignof(std::max_align_t);
  return (object_size + kAlign - 1) / kAlign * kAlign;
}

}  // namespace

Result<std::unique_ptr<Codec>> MakeCodec(const std::string& text) {
  CodecSlot slot;
  FEDRT_RETURN_IF_ERROR(Build(text, &slot));
  std::unique_ptr<Codec> codec(slot.made);
  // A fixed (d-independent) working space, e.g. topk's selection histograms,
  // is allocated once here so that Encode never allocates.
  const std::size_t fixed = codec->WorkspaceSize(0);
  if (fixed > 0) codec_internal::CodecAccess::Bind(codec.get(), ::operator new(fixed), fixed, true);
  return codec;
}

// Through the registry like every codec, so that a build without alq and amq
// (FEDRT_CODECS) links none of their code even where a caller, such as the
// device client, handles them.
Result<std::unique_ptr<AdaptiveCodec>> MakeAdaptiveCodec(const std::string& text) {
  auto spec = CodecSpec::Parse(text);
  FEDRT_RETURN_IF_ERROR(spec.status());
  if (spec->name() != "alq" && spec->name() != "amq") {
    return InvalidArgument("'" + std::string(spec->name()) + "' has no adaptive level table (adaptive codecs: alq, amq)");
  }
  Result<std::unique_ptr<Codec>> codec = MakeCodec(text);
  FEDRT_RETURN_IF_ERROR(codec.status());
  // MakeAlqCodec and MakeAmqCodec build a NormalizedQuantizer, an
  // AdaptiveCodec (no RTTI in the core, hence no dynamic_cast).
  return std::unique_ptr<AdaptiveCodec>(static_cast<AdaptiveCodec*>(codec->release()));
}

// Here rather than beside alq and amq: in a build without them (FEDRT_CODECS)
// no codec is adaptive, and a caller's level-table code (the device client's
// statistics and tables) is dropped at link time along with them.
AdaptiveCodec* AsAdaptiveCodec(Codec* codec) {
#if FEDRT_CODEC_ALQ || FEDRT_CODEC_AMQ
  return AdaptiveQuantizer(codec);
#else
  (void)codec;
  return nullptr;
#endif
}

Result<CodecFootprint> CodecFootprintFor(std::string_view spec, std::size_t max_d) {
  // Build the codec in a stack buffer to ask it for its working space.
  alignas(std::max_align_t) unsigned char probe[codec_internal::kMaxCodecObjectSize];
  CodecSlot slot;
  slot.storage = probe;
  slot.capacity = sizeof probe;
  FEDRT_RETURN_IF_ERROR(Build(spec, &slot));
  const std::size_t workspace = slot.made->WorkspaceSize(max_d);
  slot.made->~Codec();
  CodecFootprint footprint;
  footprint.size = WorkspaceOffset(slot.size) + workspace;
  footprint.alignment = alignof(std::max_align_t);
  return footprint;
}

Result<Codec*> ConstructCodec(std::string_view spec, std::size_t max_d, void* storage, std::size_t size) {
  if (storage == nullptr) return InvalidArgument("codec storage is null");
  if (reinterpret_cast<uintptr_t>(storage) % alignof(std::max_align_t) != 0) {
    return InvalidArgument(Concat({"codec storage is not aligned to ", alignof(std::max_align_t), " bytes"}));
  }
  CodecSlot slot;
  slot.storage = storage;
  slot.capacity = size;
  FEDRT_RETURN_IF_ERROR(Build(spec, &slot));
  const std::size_t offset = WorkspaceOffset(slot.size);
  const std::size_t workspace = slot.made->WorkspaceSize(max_d);
  if (size < offset + workspace) {
    slot.made->~Codec();
    return OutOfRange(Concat({"codec storage of ", size, " bytes is smaller than the ", offset + workspace,
                              " CodecFootprintFor asks for"}));
  }
  codec_internal::CodecAccess::Bind(slot.made, static_cast<unsigned char*>(storage) + offset, workspace, false);
  return slot.made;
}

void DestroyCodec(Codec* codec) {
  if (codec != nullptr) codec->~Codec();
}

std::vector<std::string> CodecNames() {
  std::vector<std::string> names;
  for (const RegisteredCodec& codec : kCodecs) names.emplace_back(codec.name);
  return names;
}

}  // namespace fedrt
