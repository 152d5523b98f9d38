#include "fedrt/platform/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>

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
  va_list args;
  va_start(args, format);
  std::vsnprintf(line, sizeof line, format, args);
  va_end(args);
  const HookBinding* binding = g_binding.load(std::memory_order_acquire);
  if (binding != nullptr) {
    binding->hook(level, line, binding->user_data);
  } else {
    port::WriteLog(level, line);
  }
}

}  // namespace fedrt
