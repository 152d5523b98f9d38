// Error feedback (codecs/README.md, "Randomness"): a wrapper around any
// codec that keeps what compression lost and adds it to the next update.
//
//   p = g + e;   payload = encode(p);   e = p - decode(payload)
//
// One ErrorFeedback object holds the residual e of one tensor (length d) on
// the sender; it starts at zero. Everything it needs (the residual and one
// scratch vector of d floats) is allocated by the constructor; Encode
// allocates nothing itself (the codec's Decode may allocate a symbol buffer,
// see the codec). A sender short of memory gives it the residual's storage
// instead and forms p = g + e in its own vector (EncodeSum): one vector of d
// floats in all, no scratch.
//
// Side information: decoding an NDQSG payload needs the receiver's side
// information y. The sender rarely has it, so `side_info` may be null: the
// wrapper then decodes against p itself. With y = p the nested decode is
// exactly the DQSG reconstruction (|w'_DQSG - p| <= scale/2 < D2/2), which is
// also what the receiver decodes whenever its side information is within the
// bound. Pass a non-null `side_info` (d floats) to use another y.
//
// Thread-safety: not synchronized; one object per tensor per sending thread.
#ifndef FEDRT_CODECS_ERROR_FEEDBACK_H_
#define FEDRT_CODECS_ERROR_FEEDBACK_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "fedrt/platform/status.h"

namespace fedrt {

class ErrorFeedback {
 public:
  explicit ErrorFeedback(std::size_t d);
  // The residual in residual[0 .. d) (zeroed here; the caller's, it must
  // outlive the object); no scratch, so only EncodeSum works.
  ErrorFeedback(float* residual, std::size_t d);
  ErrorFeedback(const ErrorFeedback&) = delete;
  ErrorFeedback& operator=(const ErrorFeedback&) = delete;

  std::size_t d() const { return d_; }
  // The residual e carried to the next Encode.
  const float* residual() const { return residual_; }
  // Writable, to restore a residual saved before a restart.
  float* mutable_residual() { return residual_; }
  // Back to e = 0 (e.g. when the model is reset or the codec changes).
  void Reset();

  // Encodes g[0..d) with the residual added, as codec.Encode does (same
  // payload format, same errors), and updates the residual. On an encode
  // error the residual is unchanged. `d` must equal d(); kInvalidArgument
  // otherwise. Fails with kInvalidArgument on NaN/Inf in g + e.
  // kFailedPrecondition for an object on caller memory (no scratch).
  Result<std::size_t> Encode(Codec& codec, const float* g, std::size_t d, const CodecContext& context,
                             uint8_t* out, std::size_t capacity, const float* side_info = nullptr);
  // As Encode, when the caller has formed p = g + residual() itself (in its
  // own memory, which EncodeSum only reads).
  Result<std::size_t> EncodeSum(Codec& codec, const float* p, std::size_t d, const CodecContext& context,
                                uint8_t* out, std::size_t capacity, const float* side_info = nullptr);

 private:
  std::vector<float> owned_;  // residual and scratch of the heap form
  float* residual_;
  float* sum_;                // p = g + e, the vector actually encoded (heap form only)
  std::size_t d_;
};

}  // namespace fedrt

#endif  // FEDRT_CODECS_ERROR_FEEDBACK_H_
