// Private: the FlatBuffers code generated from schema/fedrt.fbs at build time,
// and the checks that keep it in step with the public enums.
#ifndef FEDRT_TRANSPORT_SRC_WIRE_H_
#define FEDRT_TRANSPORT_SRC_WIRE_H_

#include <flatbuffers/flatbuffers.h>

#include "fedrt/transport/connection.h"
#include "fedrt/transport/frame.h"
#include "fedrt/transport/messages.h"
#include "fedrt_generated.h"

// Payloads and float tables are read in place: the wire is little-endian.
static_assert(FLATBUFFERS_LITTLEENDIAN, "fedrt's transport targets little-endian hosts");

namespace fedrt {
namespace transport {

static_assert(static_cast<uint16_t>(wire::ProtocolVersion::Current) == kProtocolVersion);
static_assert(static_cast<uint8_t>(wire::Message::MAX) == kMaxMessageKind);
static_assert(static_cast<uint8_t>(wire::MessageKind::MAX) == kMaxMessageKind);
static_assert(static_cast<uint8_t>(wire::Message::Update) == static_cast<uint8_t>(MessageKind::kUpdate));
static_assert(static_cast<uint8_t>(wire::Message::GossipModel) ==
              static_cast<uint8_t>(MessageKind::kGossipModel));
static_assert(static_cast<uint8_t>(wire::Message::Heartbeat) ==
              static_cast<uint8_t>(MessageKind::kHeartbeat));

// Connections only: the head of a chunked message whose first `received`
// bytes (of `size`) have arrived, as payload placement sees it
// (connection.h's PayloadHead), and where its payload starts. Fails unless
// the frame is a message that offers placement (a raw RingChunk) and its
// head lies within those bytes.
Result<PayloadHead> PeekPayloadHead(const uint8_t* body, std::size_t size, std::size_t received,
                                    const FrameLimits& limits, std::size_t* payload_offset);

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_SRC_WIRE_H_
