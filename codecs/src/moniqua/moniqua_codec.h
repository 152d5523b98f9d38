#ifndef FEDRT_CODECS_MONIQUA_MONIQUA_CODEC_H_
#define FEDRT_CODECS_MONIQUA_MONIQUA_CODEC_H_

#include <memory>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/codec_spec.h"

namespace fedrt {
Result<std::unique_ptr<Codec>> MakeMoniquaCodec(const CodecSpec& spec);
}

#endif  // FEDRT_CODECS_MONIQUA_MONIQUA_CODEC_H_
