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
// Memory: MakeCodec puts a codec on the heap; decoding may then allocate
// scratch per call (a few codings, see each family). ConstructCodec instead
// builds it in caller storage sized by CodecFootprintFor (zstd's
// estimate-then-initStatic): the storage holds the object and the working
// space for vectors of up to `max_d` coordinates, and construction, Encode,
// Decode and DecodeAccumulate of such a codec make no heap allocation (only
// a returned error's message is a std::string). Stack per call is listed in
// the codecs README.
//
// Thread-safety: a Codec object is not synchronized; use one per thread (they
// are cheap). A heap codec's Decode and DecodeAccumulate do not modify it; a
// codec in caller storage decodes in its working space, so it serves one
// thread at a time for every call.
#ifndef FEDRT_CODECS_CODEC_H_
#define FEDRT_CODECS_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fedrt/codecs/codec_spec.h"
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

// A codec's canonical spec text, held in the codec itself (no heap memory).
// Reads like a std::string: c_str(), size(), comparison, concatenation, and
// converts to std::string and std::string_view.
class CodecSpecText {
 public:
  CodecSpecText() = default;
  // Appends; the registry's canonical specs stay far below the capacity
  // (kMaxCodecSpecSize), longer text is cut there.
  CodecSpecText& operator+=(std::string_view part);

  const char* c_str() const { return text_; }
  const char* data() const { return text_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::string_view view() const { return {text_, size_}; }
  operator std::string_view() const { return view(); }
  operator std::string() const { return std::string(text_, size_); }

 private:
  char text_[kMaxCodecSpecSize + 1] = {};
  std::size_t size_ = 0;
};

inline bool operator==(const CodecSpecText& a, std::string_view b) { return a.view() == b; }
inline bool operator==(std::string_view a, const CodecSpecText& b) { return a == b.view(); }
inline bool operator==(const CodecSpecText& a, const CodecSpecText& b) { return a.view() == b.view(); }
inline bool operator!=(const CodecSpecText& a, std::string_view b) { return a.view() != b; }
inline bool operator!=(std::string_view a, const CodecSpecText& b) { return a != b.view(); }
inline std::string operator+(const std::string& a, const CodecSpecText& b) { return a + std::string(b.view()); }
inline std::string operator+(const CodecSpecText& a, const std::string& b) { return std::string(a.view()) + b; }
inline std::string operator+(const char* a, const CodecSpecText& b) { return a + std::string(b.view()); }
inline std::string operator+(const CodecSpecText& a, const char* b) { return std::string(a.view()) + b; }

namespace codec_internal {
struct CodecAccess;
}

class Codec {
 public:
  Codec() = default;
  Codec(const Codec&) = delete;
  Codec& operator=(const Codec&) = delete;
  virtual ~Codec();

  virtual CodecId id() const = 0;
  // Canonical spec with every key spelled out, e.g. "dqsg:s=2,b=0,ef=off,ec=rans".
  // Parsing it gives an equal codec; payloads carry it.
  virtual const CodecSpecText& spec() const = 0;
  // True for codecs whose decoding needs side information (NDQSG, Moniqua).
  virtual bool needs_side_info() const { return false; }
  // Whether the spec asks for error feedback (`ef=on`). The codec itself is
  // stateless; the caller keeps an ErrorFeedback object when this is true.
  virtual bool wants_error_feedback() const = 0;

  // The output buffer Encode needs for a vector of `d` floats: an upper
  // bound on the payload plus any room this codec object stages its work in
  // there (a heap DQSG codec's raw symbols, topk's selection).
  virtual std::size_t MaxEncodedSize(std::size_t d) const = 0;

  // Upper bound on the payload itself (<= MaxEncodedSize(d)). A codec from
  // ConstructCodec with working space for at least `d` coordinates stages in
  // that space, so its MaxEncodedSize(d) is this: a device that places its
  // codecs sizes its payload buffer with it. The default is MaxEncodedSize(d).
  virtual std::size_t MaxPayloadSize(std::size_t d) const { return MaxEncodedSize(d); }

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

  // Bytes of working space Encode, Decode and DecodeAccumulate need for a
  // vector of `d` floats (CodecFootprintFor adds it to the object's size).
  virtual std::size_t WorkspaceSize(std::size_t /*d*/) const { return 0; }

 protected:
  // The caller's working space if it holds `bytes` (a codec from
  // ConstructCodec), else null: the call then allocates what it needs.
  void* Workspace(std::size_t bytes) const { return bytes <= workspace_size_ ? workspace_ : nullptr; }

 private:
  friend struct codec_internal::CodecAccess;
  void* workspace_ = nullptr;
  std::size_t workspace_size_ = 0;
  bool owns_workspace_ = false;  // a heap codec's fixed working space (MakeCodec)
};

// Storage for a codec built in caller memory.
struct CodecFootprint {
  std::size_t size = 0;       // bytes: the object, then its working space
  std::size_t alignment = 0;  // the storage's address must be a multiple of it
};

// Validates `spec` and returns the storage ConstructCodec needs for it with
// working space for vectors of up to `max_d` coordinates.
Result<CodecFootprint> CodecFootprintFor(std::string_view spec, std::size_t max_d);

// Constructs the codec for `spec` in storage[0..size) (aligned as the
// footprint says); no heap allocation. The storage must outlive the codec;
// end it with DestroyCodec, never delete. Vectors longer than `max_d` still
// work but then allocate their scratch per call.
Result<Codec*> ConstructCodec(std::string_view spec, std::size_t max_d, void* storage, std::size_t size);

// Runs the destructor of a codec from ConstructCodec (nullptr is a no-op);
// the storage stays the caller's.
void DestroyCodec(Codec* codec);

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
