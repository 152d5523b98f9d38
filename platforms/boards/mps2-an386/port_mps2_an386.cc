// The fedrt platform port for QEMU's MPS2 AN386 (Cortex-M4F, bare metal):
// see fedrt/platform/port.h for the contract and board.h for the board.
//
// Clock: the board's timer 0. Memory: newlib's malloc (memalign) on the heap
// the linker script leaves between .bss and the stack. Logs: semihosting.
// No environment, no threads.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <malloc.h>

#include "board.h"
#include "fedrt/platform/port.h"

namespace fedrt::port {

uint64_t MonotonicNanos() { return board_now_ns(); }

void* AlignedAlloc(std::size_t bytes, std::size_t alignment) {
  if (alignment < sizeof(void*)) alignment = sizeof(void*);
  return memalign(alignment, bytes == 0 ? 1 : bytes);
}

void AlignedFree(void* pointer) { std::free(pointer); }

void WriteLog(LogLevel level, const char* line) {
  char prefix[32];
  const int length = std::snprintf(prefix, sizeof prefix, "[fedrt %s] ", LogLevelName(level));
  board_console_write(prefix, static_cast<std::size_t>(length));
  board_console_write(line, std::strlen(line));
  board_console_write("\n", 1);
}

const char* GetConfig(const char*) { return nullptr; }

unsigned long ArmHwcaps() { return 0; }

void CpuModelName(char* buffer, std::size_t size) {
  if (size == 0) return;
  std::snprintf(buffer, size, "Cortex-M4F (MPS2 AN386)");
}

}  // namespace fedrt::port
