// How the collectives hold what they keep between calls (collectives.h,
// "Memory"): in memory a caller bound (CollectiveShape: RequiredBytes, then
// Bind) or, unbound or asked for more than the shape said, on the heap,
// grown at first use and reused. Either way a call in the steady state
// allocates nothing. Internal to the collectives (namespace internal); a
// public header only because the collective classes hold these as members.
// Thread-safety: as the collective that holds them (one thread).
#ifndef FEDRT_RUNTIME_COLLECTIVE_MEMORY_H_
#define FEDRT_RUNTIME_COLLECTIVE_MEMORY_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <type_traits>
#include <vector>

#include "fedrt/codecs/codec.h"
#include "fedrt/platform/status.h"

namespace fedrt {
namespace peer {
namespace internal {

// An array of trivially copyable T: `capacity` elements of bound memory,
// else a heap vector. Resize keeps the first min(old, n) elements.
template <typename T>
class Scratch {
  static_assert(std::is_trivially_copyable<T>::value, "scratch holds plain values");

 public:
  void Bind(T* memory, std::size_t capacity) {
    bound_ = memory;
    capacity_ = memory != nullptr ? capacity : 0;
    size_ = 0;
    on_heap_ = false;
    heap_ = std::vector<T>();
  }
  T* Resize(std::size_t n) {
    if (!on_heap_ && n <= capacity_) {
      size_ = n;
      return bound_;
    }
    if (!on_heap_) {
      heap_.assign(bound_, bound_ + size_);  // more than was bound: the heap from now on
      on_heap_ = true;
    }
    heap_.resize(n);
    size_ = n;
    return heap_.data();
  }
  T* data() { return on_heap_ ? heap_.data() : bound_; }
  const T* data() const { return on_heap_ ? heap_.data() : bound_; }
  std::size_t size() const { return size_; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }

 private:
  T* bound_ = nullptr;
  std::size_t capacity_ = 0;
  std::size_t size_ = 0;
  bool on_heap_ = false;
  std::vector<T> heap_;
};

// One codec at a time: built in bound storage (ConstructCodec, no
// allocation) when its footprint fits, else on the heap (MakeCodec).
class CodecHolder {
 public:
  CodecHolder() = default;
  CodecHolder(const CodecHolder&) = delete;
  CodecHolder& operator=(const CodecHolder&) = delete;
  ~CodecHolder() { Reset(); }

  // Storage aligned to alignof(std::max_align_t), for vectors of up to max_d.
  void Bind(unsigned char* storage, std::size_t size, std::size_t max_d) {
    Reset();
    storage_ = storage;
    size_ = storage != nullptr ? size : 0;
    max_d_ = max_d;
  }
  // Ends the current codec and makes the one for `spec` (vectors of d).
  Result<Codec*> Make(std::string_view spec, std::size_t d) {
    Reset();
    if (storage_ != nullptr && d <= max_d_) {
      Result<Codec*> placed = ConstructCodec(spec, max_d_, storage_, size_);
      if (placed.ok()) return placed_ = *placed;
      if (placed.status().code() != StatusCode::kOutOfRange) return placed.status();
    }
    Result<std::unique_ptr<Codec>> made = MakeCodec(std::string(spec));
    if (!made.ok()) return made.status();
    heap_ = std::move(*made);
    return heap_.get();
  }
  Codec* get() const { return placed_ != nullptr ? placed_ : heap_.get(); }
  void Reset() {
    DestroyCodec(placed_);
    placed_ = nullptr;
    heap_.reset();
  }

  // The storage `spec` needs for vectors of up to max_d (its footprint;
  // its alignment is at most alignof(std::max_align_t)).
  static Result<std::size_t> StorageBytes(std::string_view spec, std::size_t max_d) {
    Result<CodecFootprint> footprint = CodecFootprintFor(spec, max_d);
    if (!footprint.ok()) return footprint.status();
    return footprint->size;
  }

 private:
  unsigned char* storage_ = nullptr;
  std::size_t size_ = 0;
  std::size_t max_d_ = 0;
  Codec* placed_ = nullptr;
  std::unique_ptr<Codec> heap_;
};

// Bind's checks: kOutOfRange when `size` is below `needed` (or memory is
// null and needed is not 0), kInvalidArgument when memory is not aligned to
// `alignment`. `who` names the collective.
Status CheckCollectiveMemory(const void* memory, std::size_t size, std::size_t needed, std::size_t alignment,
                             const char* who);

}  // namespace internal
}  // namespace peer
}  // namespace fedrt

#endif  // FEDRT_RUNTIME_COLLECTIVE_MEMORY_H_
