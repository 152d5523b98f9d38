// Link profiles: the rate, delay and loss of one device's network link, and
// the sans-IO model of one direction of such a link.
//
// A profile is written `RATE[,delay=MS][,loss=PCT][,down=RATE]`
// (`1mbit,delay=50ms,loss=1%`): RATE is the uplink (what the device sends),
// `down` the downlink (the same as RATE when absent), either of them
// `unlimited` for a direction without a rate limit
// (`unlimited,delay=50ms`: a delay only); the delay is one way,
// per direction; the loss is the share of packets lost, per direction.
// Rates are decimal as in tc: `bit`, `kbit` (1e3), `mbit` (1e6), `gbit`
// (1e9) bits per second, a decimal number before the unit (`1.5mbit`).
// Delays: `50ms`, `2s` or a bare number of milliseconds. Loss: `1%` or `1`
// (percent), at most 50%.
//
// LinkDirection is the arithmetic every shaper of fedrt shares (the
// user-space shaper in shaper.h drives it with a real clock; tests drive it
// with made-up times): a message offered at time t leaves when a token
// bucket (rate, depth kLinkBurstBytes) has its bytes, after every earlier
// message, and arrives `delay` later. A lost packet (1448 payload bytes, a
// TCP segment on Ethernet) costs its bytes again and one round trip (2 x
// delay, at least 1 ms): how TCP hides a loss from the application, as a
// delay.
//
// Thread-safety: none; ParseLinkProfile and FormatLinkProfile are pure.
#ifndef FEDRT_TRANSPORT_LINK_PROFILE_H_
#define FEDRT_TRANSPORT_LINK_PROFILE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "fedrt/platform/status.h"

namespace fedrt {
namespace transport {

struct LinkProfile {
  uint64_t up_bits_per_second = 0;    // what the device sends; 0: not limited
  uint64_t down_bits_per_second = 0;  // what the device receives; 0: not limited
  uint32_t delay_ms = 0;              // one way, each direction
  double loss = 0;                    // fraction of packets lost, each direction, 0 .. 0.5

  bool shaped() const { return up_bits_per_second != 0 || down_bits_per_second != 0 || delay_ms != 0 || loss != 0; }
};

// Parses the text form above; kInvalidArgument naming the part that is
// wrong, or for a profile that shapes nothing (`unlimited` alone).
Result<LinkProfile> ParseLinkProfile(const std::string& text);
// The canonical text form ("1mbit,delay=50ms,down=10mbit"); parses back to
// the same profile.
std::string FormatLinkProfile(const LinkProfile& profile);
// "4mbit" -> 4000000; kInvalidArgument for anything else, a zero rate
// included.
Result<uint64_t> ParseLinkRate(const std::string& text);
std::string FormatLinkRate(uint64_t bits_per_second);

// Bytes a token bucket may send at once: two Ethernet frames, so a rate
// holds within a few milliseconds from the first byte on.
inline constexpr std::size_t kLinkBurstBytes = 3000;
// Payload bytes of the packet a loss is counted in.
inline constexpr std::size_t kLinkPacketBytes = 1448;

// One direction of a shaped link. Times are microseconds of any monotonic
// clock the caller uses consistently.
class LinkDirection {
 public:
  LinkDirection(uint64_t bits_per_second, uint32_t delay_ms, double loss, uint64_t seed);

  // A message of `bytes` offered at `now_us`, after every message offered
  // before it: returns when its last byte reaches the far end. Never earlier
  // than the previous message's arrival (the link keeps order).
  uint64_t Transmit(uint64_t now_us, std::size_t bytes);
  // The same for a message whose last byte reached this direction's input
  // at `now_us` after crossing another shaped link (a peer's uplink): it was
  // arriving all along, so its transmission here started when its first
  // byte came, taken as its own time at this rate before `now_us` (exact
  // when the far link is no faster than this one), after every earlier
  // message, and never ends before `now_us`: cut-through, as a router
  // forwards packets. Transmit stores a whole message and then forwards it,
  // right for a message that came at once; for a paced one it would charge
  // the message its time at both links.
  uint64_t Forward(uint64_t now_us, std::size_t bytes);

  // Packets counted lost so far (tests, reports).
  uint64_t lost_packets() const { return lost_packets_; }

 private:
  uint64_t Draw();  // splitmix64: the same losses for the same seed

  const uint64_t bits_per_second_;
  const uint64_t delay_us_;
  const double loss_;
  uint64_t rng_;
  double tokens_ = kLinkBurstBytes;  // bytes the bucket holds at filled_us_
  uint64_t filled_us_ = 0;
  uint64_t busy_until_us_ = 0;        // the last message's last byte leaves
  uint64_t lost_packets_ = 0;
};

}  // namespace transport
}  // namespace fedrt

#endif  // FEDRT_TRANSPORT_LINK_PROFILE_H_
