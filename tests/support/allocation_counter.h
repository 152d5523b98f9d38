// Counting heap allocations, for tests of code that promises to make none.
// An executable that links allocation_counter.cc has the global operator
// new and delete replaced and, on glibc builds without AddressSanitizer
// (which owns malloc there), malloc, calloc, realloc, posix_memalign,
// aligned_alloc and memalign interposed, so that every heap allocation the
// process makes while counting is seen: fedrt's aligned buffers, its
// containers and strings, and any made by OpenBLAS. With
// FEDRT_TRACE_ALLOCATIONS set (glibc), each counted allocation prints its
// backtrace to stderr (resolve the offsets with addr2line -f -C -e TEST).
//
// Thread-safety: counts allocations from every thread; one counting window
// at a time.
#ifndef FEDRT_TESTS_SUPPORT_ALLOCATION_COUNTER_H_
#define FEDRT_TESTS_SUPPORT_ALLOCATION_COUNTER_H_

namespace fedrt::testing {

// True when the malloc family is counted as well as operator new.
bool CountsMalloc();

void StartCountingAllocations();
// Stops counting; returns the allocations since StartCountingAllocations.
long StopCountingAllocations();
// The heap bytes allocated since StartCountingAllocations and not freed
// (usable sizes; frees of blocks made before it count too). Only where
// CountsMalloc() (glibc, no AddressSanitizer); 0 elsewhere.
long long CountedLiveBytes();

// Allocations made by `run` (from every thread).
template <typename F>
long AllocationsDuring(F run) {
  StartCountingAllocations();
  run();
  return StopCountingAllocations();
}

}  // namespace fedrt::testing

#endif  // FEDRT_TESTS_SUPPORT_ALLOCATION_COUNTER_H_
