#ifndef FEDRT_CODECS_HALF_HALF_CODEC_H_
#define FEDRT_CODECS_HALF_HALF_CODEC_H_

#include <memory>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/codec_spec.h"
#include "common/codec_common.h"

namespace fedrt {
Status MakeFp16Codec(const CodecSpec& spec, codec_internal::CodecSlot* slot);
Status MakeBf16Codec(const CodecSpec& spec, codec_internal::CodecSlot* slot);
}  // namespace fedrt

#endif  // FEDRT_CODECS_HALF_HALF_CODEC_H_
