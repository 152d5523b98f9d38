#ifndef FEDRT_CODECS_FP32_FP32_CODEC_H_
#define FEDRT_CODECS_FP32_FP32_CODEC_H_

#include <memory>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/codec_spec.h"
#include "common/codec_common.h"

namespace fedrt {
Status MakeFp32Codec(const CodecSpec& spec, codec_internal::CodecSlot* slot);
}

#endif  // FEDRT_CODECS_FP32_FP32_CODEC_H_
