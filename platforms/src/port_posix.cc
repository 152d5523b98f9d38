// The POSIX port (Linux boards, hosts): see fedrt/platform/port.h.
#include "fedrt/platform/port.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#if defined(__linux__)
#include <sys/auxv.h>
#endif

namespace fedrt::port {

uint64_t MonotonicNanos() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void* AlignedAlloc(std::size_t bytes, std::size_t alignment) {
  if (alignment < sizeof(void*)) alignment = sizeof(void*);
  void* pointer = nullptr;
  // posix_memalign accepts size 0 and returns a pointer that free() takes.
  if (posix_memalign(&pointer, alignment, bytes == 0 ? 1 : bytes) != 0) return nullptr;
  return pointer;
}

void AlignedFree(void* pointer) { std::free(pointer); }

void WriteLog(LogLevel level, const char* line) {
  // One fprintf per line: stdio locks the stream, so lines from several
  // threads never interleave.
  std::fprintf(stderr, "[fedrt %s] %s\n", LogLevelName(level), line);
}

const char* GetConfig(const char* name) { return std::getenv(name); }

unsigned long ArmHwcaps() {
#if defined(__linux__)
  return getauxval(AT_HWCAP);
#else
  return 0;
#endif
}

void CpuModelName(char* buffer, std::size_t size) {
  if (size == 0) return;
  buffer[0] = '\0';
#if defined(__linux__)
  // x86 reads the brand string from CPUID instead; ARM kernels print no model
  // name, so "CPU part" (the core type, e.g. 0xd08 = Cortex-A72) is the best there is.
  std::FILE* file = std::fopen("/proc/cpuinfo", "r");
  if (file == nullptr) return;
  char line[256];
  const char* keys[] = {"model name", "Hardware", "CPU part"};
  while (std::fgets(line, sizeof line, file) != nullptr) {
    for (const char* key : keys) {
      if (std::strncmp(line, key, std::strlen(key)) != 0) continue;
      const char* colon = std::strchr(line, ':');
      if (colon == nullptr) continue;
      const char* value = colon + 1;
      while (*value == ' ' || *value == '\t') ++value;
      std::snprintf(buffer, size, "%s%s", std::strcmp(key, "CPU part") == 0 ? "CPU part " : "", value);
      std::size_t length = std::strlen(buffer);
      while (length > 0 && (buffer[length - 1] == '\n' || buffer[length - 1] == ' ')) buffer[--length] = '\0';
      std::fclose(file);
      return;
    }
  }
  std::fclose(file);
#endif
}

}  // namespace fedrt::port
