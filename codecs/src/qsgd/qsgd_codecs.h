// Factories of the normalized quantizers: qsgd, terngrad, sign, alq, amq
// (codecs/README.md). Registered in common/registry.cc.
#ifndef FEDRT_CODECS_QSGD_QSGD_CODECS_H_
#define FEDRT_CODECS_QSGD_QSGD_CODECS_H_

#include <memory>

#include "fedrt/codecs/adaptive.h"
#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/codec_spec.h"

namespace fedrt {

Result<std::unique_ptr<Codec>> MakeQsgdCodec(const CodecSpec& spec);
Result<std::unique_ptr<Codec>> MakeTernGradCodec(const CodecSpec& spec);
Result<std::unique_ptr<Codec>> MakeSignCodec(const CodecSpec& spec);
Result<std::unique_ptr<Codec>> MakeAlqCodec(const CodecSpec& spec);
Result<std::unique_ptr<Codec>> MakeAmqCodec(const CodecSpec& spec);

}  // namespace fedrt

#endif  // FEDRT_CODECS_QSGD_QSGD_CODECS_H_
