// Factories of the normalized quantizers: qsgd, terngrad, sign, alq, amq
// (codecs/README.md). Registered in common/registry.cc.
#ifndef FEDRT_CODECS_QSGD_QSGD_CODECS_H_
#define FEDRT_CODECS_QSGD_QSGD_CODECS_H_

#include <memory>

#include "fedrt/codecs/adaptive.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/codec_spec.h"
#include "common/codec_common.h"

namespace fedrt {

Status MakeQsgdCodec(const CodecSpec& spec, codec_internal::CodecSlot* slot);
Status MakeTernGradCodec(const CodecSpec& spec, codec_internal::CodecSlot* slot);
Status MakeSignCodec(const CodecSpec& spec, codec_internal::CodecSlot* slot);
Status MakeAlqCodec(const CodecSpec& spec, codec_internal::CodecSlot* slot);
Status MakeAmqCodec(const CodecSpec& spec, codec_internal::CodecSlot* slot);
// AsAdaptiveCodec for a build with alq or amq (registry.cc decides).
AdaptiveCodec* AdaptiveQuantizer(Codec* codec);

}  // namespace fedrt

#endif  // FEDRT_CODECS_QSGD_QSGD_CODECS_H_
