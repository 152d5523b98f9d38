// The logging hook.
//
// The library logs through one process-wide hook. By default messages at
// kInfo and above go to the port's log sink (stderr on Linux). An application,
// or a firmware image without stderr, installs its own hook to route them
// elsewhere; passing nullptr restores the default.
//
// Thread-safety: Log() may be called from any thread; the hook must be
// thread-safe itself. SetLogHook/SetLogLevel are atomic but meant for start-up.
#ifndef FEDRT_PLATFORM_LOG_H_
#define FEDRT_PLATFORM_LOG_H_

namespace fedrt {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

const char* LogLevelName(LogLevel level);  // "debug", "info", "warning", "error"

// `message` is one line without a trailing newline, valid only during the call.
using LogHook = void (*)(LogLevel level, const char* message, void* user_data);

void SetLogHook(LogHook hook, void* user_data);
void SetLogLevel(LogLevel minimum);
LogLevel GetLogLevel();

// printf-style. Messages longer than 1 KiB are truncated.
void Log(LogLevel level, const char* format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

}  // namespace fedrt

#endif  // FEDRT_PLATFORM_LOG_H_
