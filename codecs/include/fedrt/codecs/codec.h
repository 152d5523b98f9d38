// The codec API: every update codec (quantizer, sparsifier, Moniqua) behind
// one interface, created from the spec string users type ("dqsg:s=2,b=0").
//
// A payload is self-describing: a fixed header (payload.h) names the codec,
// its parameters, the vector length, round, tensor and sender, and carries a
// CRC32C of the body. Encoding writes into a caller buffer of at least
// MaxEncodedSize(d) bytes and allocates nothing. Decoding treats the payload
// as untrusted: every length, count, symbol and index is checked, and a bad
// payload yields a typed error (StatusCode::kCorrupt and friends), never an
// out-of-bounds access.
//
// Randomness (dither, stochastic rounding, random subsets) comes from the
// Philox streams of philox.h keyed by CodecContext; sender and receiver share
// the session seed, so random values are never sent.
//
// Stateful parts are separate, explicit objects: error-feedback residuals
// (error_feedback.h) and adaptive level tables (levels.h) belong to the
// caller, not to the codec.
//
// Thread-safety: a Codec object is not synchronized; use one per thread (they
// are cheap). Decode and DecodeAccumulate do not modify the codec.
#ifndef FEDRT_CODECS_CODEC_H_
#define FEDRT_CODECS_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fedrt/codecs/payload.h"
#include "fedrt/platform/status.h"

namespace fedrt {

// What both ends of a transfer agree on without sending it.
struct CodecContext {
  uint64_t session_seed = 0;  // agreed at join time
  uint32_t round = 0;
  uint32_t tensor_id = 0;
  uint32_t sender_id = 0;     // low 24 bits take part in the random streams
};

// Figures every codec reports for one encoded vector.
struct CodecStats {
  std::size_t payload_bytes = 0;
  double bits_per_coordinate = 0;  // all headers included
};

class Codec {
 public:
  virtual ~Codec() = default;

  virtual CodecId id() const = 0;
  // Canonical spec with every key spelled out, e.g. "dqsg:s=2,b=0,ef=off,ec=rans".
  // Parsing it gives an equal codec; payloads carry it.
  virtual const std::string& spec() const = 0;
  // True for codecs whose decoding needs side information (NDQSG, Moniqua).
  virtual bool needs_side_info() const { return false; }
  // Whether the spec asks for error feedback (`ef=on`). The codec itself is
  // stateless; the caller keeps an ErrorFeedback object when this is true.
  virtual bool wants_error_feedback() const = 0;

  // Upper bound on the payload size for a vector of `d` floats.
  virtual std::size_t MaxEncodedSize(std::size_t d) const = 0;

  // Encodes input[0..d) into out[0..capacity). Returns the payload size.
  // Fails with kInvalidArgument on NaN or Inf in the input, kOutOfRange when
  // capacity < MaxEncodedSize(d).
  virtual Result<std::size_t> Encode(const float* input, std::size_t d, const CodecContext& context,
                                     uint8_t* out, std::size_t capacity) = 0;

  // Decodes a payload of this codec into out[0..d). `d` must equal the
  // payload's length; the context must match the payload's round, tensor and
  // sender. `side_info` (d floats) is required when needs_side_info().
  virtual Status Decode(const uint8_t* payload, std::size_t size, const CodecContext& context,
                        float* out, std::size_t d, const float* side_info = nullptr) const = 0;

  // accumulator[i] += weight * decoded[i]. The default decodes into a scratch
  // vector (one allocation); codecs override it to fuse the two passes.
  virtual Status DecodeAccumulate(const uint8_t* payload, std::size_t size,
                                  const CodecContext& context, float weight, float* accumulator,
                                  std::size_t d, const float* side_info = nullptr) const;
};

// Creates a codec from its spec string (codecs/README.md, "Codec reference").
// Unknown names, unknown keys and out-of-range values are kInvalidArgument
// with a message that lists what is accepted.
Result<std::unique_ptr<Codec>> MakeCodec(const std::string& spec);

// Every codec name MakeCodec accepts, in registry order.
std::vector<std::string> CodecNames();

// kInvalidArgument naming the first NaN or Inf coordinate, OK otherwise.
Status CheckFinite(const float* values, std::size_t d);

// Fills `stats` for a payload of `payload_bytes` encoding `d` coordinates.
CodecStats MakeCodecStats(std::size_t payload_bytes, std::size_t d);

}  // namespace fedrt

#endif  // FEDRT_CODECS_CODEC_H_
