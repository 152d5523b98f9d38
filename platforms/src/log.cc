#include "fedrt/platform/log.h"

#include <atomic>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "fedrt/platform/port.h"

namespace fedrt {
namespace {

// The hook and its user data change together. The embedded core avoids
// <mutex> (not every firmware toolchain has it), so SetLogHook fills the
// spare one of two slots and then publishes it with one atomic store. A
// reader sees a whole pair unless two SetLogHook calls land during its single
// call, which the header rules out (hooks are set at start-up).
struct HookBinding {
  LogHook hook;
  void* user_data;
};
HookBinding g_slots[2];
std::atomic<int> g_next_slot{0};
std::atomic<const HookBinding*> g_binding{nullptr};
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

#if defined(_NEWLIB_VERSION) && !defined(_WANT_IO_C99_FORMATS)
// newlib as Debian's arm-none-eabi builds it prints no C99 length modifiers:
// "%zu" comes out as "zu" and consumes no argument, shifting every later one.
// size_t is unsigned int on its 32-bit targets, so "%u" reads the same
// argument; the format is rewritten here, once, instead of at each call site.
static_assert(sizeof(std::size_t) == sizeof(unsigned), "newlib without C99 formats: size_t must be unsigned int");
constexpr bool kRewriteSizeFormats = true;
#else
constexpr bool kRewriteSizeFormats = false;
#endif

// Copies `format` into `out` without the 'z' of each %z conversion.
const char* WithoutSizeModifiers(const char* format, char* out, std::size_t capacity) {
  std::size_t n = 0;
  for (const char* p = format; *p != '\0'; ++p) {
    if (n + 1 >= capacity) return format;  // too long to rewrite: print as is
    out[n++] = *p;
    if (*p != '%') continue;
    // Flags, width and precision, then drop a 'z'.
    while (p[1] != '\0' && std::strchr("-+ #0123456789.*", p[1]) != nullptr && n + 1 < capacity) out[n++] = *++p;
    if (p[1] == 'z') ++p;
    else if (p[1] == '%' && n + 1 < capacity) out[n++] = *++p;
  }
  out[n] = '\0';
  return out;
}

}  // namespace

const char* LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
  }
  return "?";
}

void SetLogHook(LogHook hook, void* user_data) {
  if (hook == nullptr) {
    g_binding.store(nullptr, std::memory_order_release);
    return;
  }
  HookBinding* slot = &g_slots[g_next_slot.fetch_xor(1, std::memory_order_relaxed)];
  slot->hook = hook;
  slot->user_data = user_data;
  g_binding.store(slot, std::memory_order_release);
}

void SetLogLevel(LogLevel minimum) { g_level.store(static_cast<int>(minimum), std::memory_order_relaxed); }

LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed)); }

void Log(LogLevel level, const char* format, ...) {
  if (static_cast<int>(level) < g_level.load(std::memory_order_relaxed)) return;
  char line[1024];
  char rewritten[256];
  const char* printed = kRewriteSizeFormats ? WithoutSizeModifiers(format, rewritten, sizeof rewritten) : format;
  va_list args;
  va_start(args, format);
  // The format is the caller's, checked at each call site (Log's format
  // attribute); `printed` is that format with size modifiers removed.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
  std::vsnprintf(line, sizeof line, printed, args);
#pragma GCC diagnostic pop
  va_end(args);
  const HookBinding* binding = g_binding.load(std::memory_order_acquire);
  if (binding != nullptr) {
    binding->hook(level, line, binding->user_data);
  } else {
    port::WriteLog(level, line);
  }
}

}  // namespace fedrt
