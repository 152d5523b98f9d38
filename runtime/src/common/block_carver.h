// Cutting an engine's memory block into its pieces (the device client's, the
// aggregator's and the peer trainer's): one layout function measures (null
// base) and places, so RequiredBytes and CreateIn share it. In src/common/
// so that star and peer both use it without depending on each other.
#ifndef FEDRT_RUNTIME_SRC_COMMON_BLOCK_CARVER_H_
#define FEDRT_RUNTIME_SRC_COMMON_BLOCK_CARVER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace fedrt {

// kSimdAlignment: floats and doubles for the kernels, payload bytes.
inline constexpr std::size_t kBlockAlignment = 64;

inline std::size_t AlignUp(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

class Carver {
 public:
  explicit Carver(unsigned char* base) : base_(base) {}
  template <typename T>
  T* Take(std::size_t count, std::size_t alignment = alignof(T)) {
    used_ = AlignUp(used_, std::max(alignment, alignof(T)));
    // Through void*: the offset was aligned for T just above (-Wcast-align on 32-bit ARM).
    T* at = base_ != nullptr ? static_cast<T*>(static_cast<void*>(base_ + used_)) : nullptr;
    used_ += count * sizeof(T);
    return at;
  }
  std::size_t used() const { return used_; }

 private:
  unsigned char* base_;
  std::size_t used_ = 0;
};

// The first kBlockAlignment boundary at or after `memory` (a block is
// measured with kBlockAlignment - 1 bytes to spare, so any address serves).
inline unsigned char* AlignedBlock(void* memory) {
  const auto at = reinterpret_cast<std::uintptr_t>(memory);
  return static_cast<unsigned char*>(memory) + (AlignUp(at, kBlockAlignment) - at);
}

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_SRC_COMMON_BLOCK_CARVER_H_
