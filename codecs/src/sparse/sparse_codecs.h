#ifndef FEDRT_CODECS_SPARSE_SPARSE_CODECS_H_
#define FEDRT_CODECS_SPARSE_SPARSE_CODECS_H_

#include <memory>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/codec_spec.h"

namespace fedrt {
Result<std::unique_ptr<Codec>> MakeTopKCodec(const CodecSpec& spec);
Result<std::unique_ptr<Codec>> MakeRandKCodec(const CodecSpec& spec);
Result<std::unique_ptr<Codec>> MakeRTopKCodec(const CodecSpec& spec);
}  // namespace fedrt

#endif  // FEDRT_CODECS_SPARSE_SPARSE_CODECS_H_
