#include "cli/console.h"

#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <mutex>

#include "fedrt/platform/clock.h"
#include "fedrt/platform/log.h"

namespace fedrt::cli {
namespace {

std::string g_log_level;  // the parsed --log-level ("" when not given)
std::mutex g_mutex;       // the log hook and the progress line share stderr
bool g_progress_shown = false;

// "2026-12-01T23:01:02.345Z [fedrt info] message": UTC, milliseconds.
void TimestampedLine(LogLevel level, const char* message, void*) {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  std::tm utc{};
  ::gmtime_r(&now.tv_sec, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &utc);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_progress_shown) std::fputs("\r\033[K", stderr);
  g_progress_shown = false;
  std::fprintf(stderr, "%s.%03dZ [fedrt %s] %s\n", stamp, static_cast<int>(now.tv_nsec / 1000000),
               LogLevelName(level), message);
}

std::string Duration(double seconds) {
  const long s = std::lround(seconds);
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof text, "%ldh%02ldm", s / 3600, s / 60 % 60);
  } else if (s >= 60) {
    std::snprintf(text, sizeof text, "%ldm%02lds", s / 60, s % 60);
  } else {
    std::snprintf(text, sizeof text, "%lds", s);
  }
  return text;
}

}  // namespace

void AddLogLevelFlag(CLI::App& command) {
  command.add_option("--log-level", g_log_level, "Least severe log lines shown: error, warn, info (default) or debug")
      ->check(CLI::IsMember({"error", "warn", "info", "debug"}));
}

void StartLogging(const CLI::App&) {
  LogLevel level = LogLevel::kInfo;
  if (g_log_level == "error") level = LogLevel::kError;
  if (g_log_level == "warn") level = LogLevel::kWarning;
  if (g_log_level == "debug") level = LogLevel::kDebug;
  SetLogLevel(level);
  SetLogHook(TimestampedLine, nullptr);
}

bool LogLevelGiven() { return !g_log_level.empty(); }

Progress::Progress(std::string what) : what_(std::move(what)), enabled_(::isatty(STDERR_FILENO) == 1) {}

Progress::~Progress() { Done(); }

void Progress::Update(double fraction, const std::string& detail) {
  if (!enabled_) return;
  const uint64_t now = SystemClock().NowMs();
  if (started_ms_ == 0) started_ms_ = now;
  if (drawn_ms_ != 0 && now - drawn_ms_ < 250) return;
  drawn_ms_ = now;
  fraction = std::min(1.0, std::max(0.0, fraction));
  std::string line = what_ + " " + std::to_string(static_cast<int>(fraction * 100)) + "%";
  if (!detail.empty()) line += " " + detail;
  const double elapsed = static_cast<double>(now - started_ms_) / 1000.0;
  if (fraction > 0.01 && elapsed > 0.5) line += "  ETA " + Duration(elapsed / fraction * (1 - fraction));
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
  g_progress_shown = true;
}

void Progress::Hide() {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_progress_shown) std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  g_progress_shown = false;
  drawn_ms_ = 0;  // draw again at the next Update
}

void Progress::Done() {
  Hide();
  started_ms_ = 0;
}

}  // namespace fedrt::cli
