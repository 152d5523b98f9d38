// Aligned memory for vectors that SIMD kernels stream over.
//
// Kernels never require alignment (they handle any pointer), but buffers that
// fedrt allocates itself are aligned to kSimdAlignment so that loads do not
// split cache lines. Allocation failure is reported, never thrown.
//
// Thread-safety: AlignedArray is a value type (move-only); not synchronized.
#ifndef FEDRT_PLATFORM_MEMORY_H_
#define FEDRT_PLATFORM_MEMORY_H_

#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>

namespace fedrt {

// A cache line, and a multiple of every SIMD register width fedrt uses.
inline constexpr std::size_t kSimdAlignment = 64;

// Returns nullptr when `bytes` cannot be allocated. `alignment` is a power of
// two. AlignedAlloc(0) returns a valid pointer that must still be freed.
void* AlignedAlloc(std::size_t bytes, std::size_t alignment = kSimdAlignment);
void AlignedFree(void* pointer);

// An owned, aligned, zero-initialised array of trivially copyable T.
template <typename T>
class AlignedArray {
  static_assert(std::is_trivially_copyable_v<T>, "AlignedArray holds plain numbers");

 public:
  AlignedArray() = default;
  // Check ok() afterwards: on allocation failure the array is empty.
  explicit AlignedArray(std::size_t size) { Resize(size); }
  AlignedArray(const AlignedArray&) = delete;
  AlignedArray& operator=(const AlignedArray&) = delete;
  AlignedArray(AlignedArray&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  AlignedArray& operator=(AlignedArray&& other) noexcept {
    if (this != &other) {
      AlignedFree(data_);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  ~AlignedArray() { AlignedFree(data_); }

  // Replaces the contents with `size` zeros. Returns false on allocation
  // failure (the array is then empty).
  bool Resize(std::size_t size) {
    AlignedFree(data_);
    data_ = nullptr;
    size_ = 0;
    if (size > static_cast<std::size_t>(-1) / sizeof(T)) return false;
    data_ = static_cast<T*>(AlignedAlloc(size * sizeof(T)));
    if (data_ == nullptr) return false;
    std::memset(static_cast<void*>(data_), 0, size * sizeof(T));
    size_ = size;
    return true;
  }

  bool ok() const { return data_ != nullptr; }
  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

// A view of caller-owned memory: `size` elements at `data` (C++17 has no
// std::span). The view owns nothing; whoever hands it over keeps the memory
// alive for as long as the receiver says it uses it.
template <typename T>
struct Span {
  T* data = nullptr;
  std::size_t size = 0;
};
using FloatSpan = Span<float>;

}  // namespace fedrt

#endif  // FEDRT_PLATFORM_MEMORY_H_
