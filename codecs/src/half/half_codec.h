#ifndef FEDRT_CODECS_HALF_HALF_CODEC_H_
#define FEDRT_CODECS_HALF_HALF_CODEC_H_

#include <memory>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/codec_spec.h"

namespace fedrt {
Result<std::unique_ptr<Codec>> MakeFp16Codec(const CodecSpec& spec);
Result<std::unique_ptr<Codec>> MakeBf16Codec(const CodecSpec& spec);
}  // namespace fedrt

#endif  // FEDRT_CODECS_HALF_HALF_CODEC_H_
