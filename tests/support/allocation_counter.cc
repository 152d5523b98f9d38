// The replacements behind allocation_counter.h. Exactly one per executable:
// link it as a source of the test that counts.
#include "allocation_counter.h"

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <new>

#if defined(__GLIBC__)
#include <execinfo.h>
#include <malloc.h>
#include <unistd.h>
#endif

namespace {

std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
std::atomic<long long> g_live_bytes{0};  // counted with the malloc family only

#if defined(__GLIBC__)
// FEDRT_TRACE_ALLOCATIONS=1: each counted allocation prints its backtrace to
// stderr (backtrace_symbols_fd does not allocate; a nested one is skipped).
thread_local bool t_tracing = false;
void TraceAllocation() {
  static const bool enabled = std::getenv("FEDRT_TRACE_ALLOCATIONS") != nullptr;
  if (!enabled || t_tracing) return;
  t_tracing = true;
  void* frames[32];
  const int n = backtrace(frames, 32);
  static const char kHead[] = "-- counted allocation:\n";
  if (write(2, kHead, sizeof(kHead) - 1) < 0) {
  }
  backtrace_symbols_fd(frames, n, 2);
  t_tracing = false;
}
#else
void TraceAllocation() {}
#endif

inline void CountAllocation() {
  if (g_counting.load(std::memory_order_relaxed)) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    TraceAllocation();
  }
}

}  // namespace

// The replacements below pair malloc with free on purpose; GCC, seeing them
// inlined into std::allocator, takes that for a new/free mismatch.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

void* operator new(std::size_t size) {
  CountAllocation();
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return operator new(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  CountAllocation();
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size, const std::nothrow_t& tag) noexcept { return operator new(size, tag); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FEDRT_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define FEDRT_TEST_ASAN 1
#endif

#if defined(__GLIBC__) && !defined(FEDRT_TEST_ASAN)
#define FEDRT_TEST_COUNTS_MALLOC 1
extern "C" {
void* __libc_malloc(std::size_t size);
void* __libc_calloc(std::size_t count, std::size_t size);
void* __libc_realloc(void* p, std::size_t size);
void* __libc_memalign(std::size_t alignment, std::size_t size);
void __libc_free(void* p);
}  // extern "C"

namespace {

// The live bytes while counting: a block's usable size when it is made and
// when it is freed.
void* Made(void* p) {
  if (p != nullptr && g_counting.load(std::memory_order_relaxed)) {
    g_live_bytes.fetch_add(static_cast<long long>(malloc_usable_size(p)), std::memory_order_relaxed);
  }
  return p;
}
void Freeing(void* p) {
  if (p != nullptr && g_counting.load(std::memory_order_relaxed)) {
    g_live_bytes.fetch_sub(static_cast<long long>(malloc_usable_size(p)), std::memory_order_relaxed);
  }
}

}  // namespace

extern "C" {
void* malloc(std::size_t size) {
  CountAllocation();
  return Made(__libc_malloc(size));
}
void* calloc(std::size_t count, std::size_t size) {
  CountAllocation();
  return Made(__libc_calloc(count, size));
}
void* realloc(void* p, std::size_t size) {
  CountAllocation();
  Freeing(p);
  return Made(__libc_realloc(p, size));
}
void* memalign(std::size_t alignment, std::size_t size) {
  CountAllocation();
  return Made(__libc_memalign(alignment, size));
}
void* aligned_alloc(std::size_t alignment, std::size_t size) {
  CountAllocation();
  return Made(__libc_memalign(alignment, size));
}
int posix_memalign(void** out, std::size_t alignment, std::size_t size) {
  CountAllocation();
  void* p = Made(__libc_memalign(alignment, size));
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
void free(void* p) {
  Freeing(p);
  __libc_free(p);
}
}  // extern "C"
#endif

namespace fedrt::testing {

bool CountsMalloc() {
#if FEDRT_TEST_COUNTS_MALLOC
  return true;
#else
  return false;
#endif
}

void StartCountingAllocations() {
  g_allocations.store(0);
  g_live_bytes.store(0);
  g_counting.store(true);
}

long StopCountingAllocations() {
  g_counting.store(false);
  return g_allocations.load();
}

long long CountedLiveBytes() { return g_live_bytes.load(); }

}  // namespace fedrt::testing
