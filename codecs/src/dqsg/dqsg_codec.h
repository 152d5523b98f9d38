// DQSG and NDQSG codecs (dqsg_codec.cc). Internal to fedrt_codecs.
#ifndef FEDRT_CODECS_DQSG_DQSG_CODEC_H_
#define FEDRT_CODECS_DQSG_DQSG_CODEC_H_

#include <memory>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/codec_spec.h"
#include "common/codec_common.h"

namespace fedrt {

Status MakeDqsgCodec(const CodecSpec& spec, codec_internal::CodecSlot* slot);
Status MakeNdqsgCodec(const CodecSpec& spec, codec_internal::CodecSlot* slot);

namespace codec_internal {

// The coarse steps D2 = rho * scale of every bucket of a validated ndqsg
// payload, with the bucket size. kInvalidArgument if `codec` is not ndqsg.
Status NdqsgCoarseSteps(const Codec& codec, const uint8_t* payload, std::size_t size,
                        const CodecContext& context, std::size_t d, std::vector<float>* steps,
                        std::size_t* bucket);

}  // namespace codec_internal
}  // namespace fedrt

#endif  // FEDRT_CODECS_DQSG_DQSG_CODEC_H_
