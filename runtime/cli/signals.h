// SIGINT and SIGTERM for the long-running commands: the first one asks the
// command to stop cleanly (finish the round, save state, close connections);
// main() then exits with 128 + the signal number (130, 143), never 0.
#ifndef FEDRT_RUNTIME_CLI_SIGNALS_H_
#define FEDRT_RUNTIME_CLI_SIGNALS_H_

#include <atomic>

namespace fedrt::cli {

// Installs the handlers; returns the flag they set, for the engines' `stop`.
std::atomic<bool>* CatchStopSignals();
// The signal that asked for the stop, 0 when none did.
int StopSignal();

}  // namespace fedrt::cli

#endif  // FEDRT_RUNTIME_CLI_SIGNALS_H_
