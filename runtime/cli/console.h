// The terminal side of the tool's long-running commands (serve, device,
// peer, sim, train): log lines with a UTC timestamp on stderr at the level
// `--log-level` chooses, and one progress line with an ETA that is drawn
// only when stderr is a terminal (nothing is added to a file or a pipe).
//
// Thread-safety: log lines may come from any thread (the hook locks); a
// Progress belongs to one thread.
#ifndef FEDRT_RUNTIME_CLI_CONSOLE_H_
#define FEDRT_RUNTIME_CLI_CONSOLE_H_

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace fedrt::cli {

// Adds --log-level error|warn|info|debug to `command`.
void AddLogLevelFlag(CLI::App& command);
// After parsing `command` (one given AddLogLevelFlag): installs the
// timestamped log sink and its --log-level (info when not given).
void StartLogging(const CLI::App& command);
// Whether the running command was given --log-level (sim quiets the library
// to warnings unless it was).
bool LogLevelGiven();

// "<what> 42% <detail> ETA 1m05s", redrawn in place at most four times a
// second, the ETA from the time since the first Update. Log lines clear it
// before they are written; the next Update draws it again. Done() (or the
// destructor) clears it for good.
class Progress {
 public:
  explicit Progress(std::string what);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // `fraction` of the work done, 0 to 1.
  void Update(double fraction, const std::string& detail = std::string());
  // Clears the line for other output and keeps the clock: the next Update
  // draws it again with the ETA of the whole work (a run of many rounds).
  void Hide();
  void Done();

 private:
  std::string what_;
  bool enabled_ = false;
  uint64_t started_ms_ = 0;
  uint64_t drawn_ms_ = 0;
};

}  // namespace fedrt::cli

#endif  // FEDRT_RUNTIME_CLI_CONSOLE_H_
