#ifndef FEDRT_CODECS_SPARSE_SPARSE_CODECS_H_
#define FEDRT_CODECS_SPARSE_SPARSE_CODECS_H_

#include <memory>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/codec_spec.h"
#include "common/codec_common.h"

namespace fedrt {
Status MakeTopKCodec(const CodecSpec& spec, codec_internal::CodecSlot* slot);
Status MakeRandKCodec(const CodecSpec& spec, codec_internal::CodecSlot* slot);
Status MakeRTopKCodec(const CodecSpec& spec, codec_internal::CodecSlot* slot);
}  // namespace fedrt

#endif  // FEDRT_CODECS_SPARSE_SPARSE_CODECS_H_
