// The porting contract: the few functions fedrt needs from the operating
// system. platforms/src/port_posix.cc implements them for Linux (and other
// POSIX systems); a board without Linux provides its own file and points
// FEDRT_PLATFORM_PORT at it. platforms/README.md explains each requirement.
//
// Everything else in fedrt uses the wrappers in clock.h, memory.h, log.h and
// cpu.h, never the OS directly, so these functions are the whole port.
#ifndef FEDRT_PLATFORM_PORT_H_
#define FEDRT_PLATFORM_PORT_H_

#include <cstddef>
#include <cstdint>

#include "fedrt/platform/log.h"

namespace fedrt::port {

// Monotonic nanoseconds; never decreases. Resolution of 1 us or better is enough.
uint64_t MonotonicNanos();

// Memory aligned to `alignment` (a power of two, at most 4096), or nullptr.
// `bytes` may be 0. AlignedFree(nullptr) does nothing.
void* AlignedAlloc(std::size_t bytes, std::size_t alignment);
void AlignedFree(void* pointer);

// Writes one finished log line (no trailing newline) somewhere a person can
// read it. Must be safe to call from several threads.
void WriteLog(LogLevel level, const char* line);

// The value of a configuration variable (FEDRT_ISA), or nullptr where the
// platform has no environment.
const char* GetConfig(const char* name);

// ARMv7 only: the kernel's AT_HWCAP word (HWCAP_NEON is bit 12), or 0 when
// unknown, in which case NEON is assumed absent. Unused on other architectures.
unsigned long ArmHwcaps();

// A human-readable CPU model name into `buffer` (NUL-terminated), or an empty
// string when unknown.
void CpuModelName(char* buffer, std::size_t size);

}  // namespace fedrt::port

#endif  // FEDRT_PLATFORM_PORT_H_
