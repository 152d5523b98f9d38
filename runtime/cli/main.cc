// The `fedrt` command-line tool. Each subcommand lives in its own file and
// registers itself here; this file only parses the top level and dispatches.
//
// Argument parsing uses CLI11 (Debian's libcli11-dev): it gives consistent
// --help output, type checking and clear errors for wrong flags, which users
// of a tool with many subcommands rely on.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/prctl.h>
#endif
#include <unistd.h>

#include "cli/bench_record.h"
#include "cli/commands.h"
#include "cli/console.h"
#include "cli/json_config.h"
#include "cli/signals.h"
#include "fedrt/platform/cpu.h"
#include "fedrt/runtime/build_info.h"
#include "fedrt/runtime/gemm.h"

namespace {

// OpenBLAS chooses its kernels when it loads, by CPU model. On an AVX2 + FMA
// CPU whose model it does not know (virtual CPUs often report a generic
// one) it settles for SSE3 "Prescott" kernels, about 3x slower for training.
// The only way to change that is OPENBLAS_CORETYPE before the library loads,
// so the tool sets it and starts itself again, once. Users who set the
// variable themselves keep their choice. FEDRT_OPENBLAS_RESTART=force
// restarts on any CPU: the test hook of the process name below.
void RestartWithBetterOpenBlasKernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  const char* force = std::getenv("FEDRT_OPENBLAS_RESTART");
  if (force == nullptr || std::strcmp(force, "force") != 0) {
    if (std::strcmp(fedrt::OpenBlasCoreName(), "Prescott") != 0) return;
    const fedrt::CpuFeatures& cpu = fedrt::DetectCpu();
    if (!cpu.avx2 || !cpu.fma) return;
  }
  if (setenv("OPENBLAS_CORETYPE", "Haswell", 1) != 0) return;
  execv("/proc/self/exe", argv);  // returns only on failure: carry on as we are
}

// The kernel names a process after the file it executed: "exe" after the
// restart above. ps, top, pgrep and systemd show that name, so it is set
// back to the one the user started (argv[0]'s last part, at most 15 bytes).
void KeepProcessName(const char* argv0) {
  const char* slash = std::strrchr(argv0, '/');
  const char* name = slash != nullptr ? slash + 1 : argv0;
#if defined(__linux__)
  if (*name != '\0') prctl(PR_SET_NAME, name, 0, 0, 0);
#endif
}

// Exit codes (documented in runtime/README.md): 0 success, 1 a failure the
// command reports, 2 a usage error, 128 + the signal number after a clean
// stop on SIGINT (130) or SIGTERM (143).
constexpr int kUsageError = 2;

std::size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// "did you mean ...?" for the words CLI11 did not expect: the closest flag
// of the subcommand that was being parsed, or the closest subcommand.
std::string Suggestion(const CLI::App& app, const std::string& message) {
  const CLI::App* current = &app;
  for (;;) {
    const auto parsed = current->get_subcommands();
    if (parsed.empty()) break;
    current = parsed.back();
  }
  std::vector<std::string> candidates;
  for (const CLI::Option* option : current->get_options()) {
    for (const std::string& name : option->get_lnames()) candidates.push_back("--" + name);
  }
  for (const CLI::App* sub : current->get_subcommands({})) candidates.push_back(sub->get_name());
  const std::size_t colon = message.rfind(": ");
  if (colon == std::string::npos) return "";
  std::string words = message.substr(colon + 2);
  std::string hints;
  std::size_t at = 0;
  while (at < words.size()) {
    std::size_t end = words.find(' ', at);
    if (end == std::string::npos) end = words.size();
    std::string word = words.substr(at, end - at);
    at = end + 1;
    word = word.substr(0, word.find('='));
    std::string best;
    std::size_t best_distance = 3;  // at most two edits away, or a prefix
    for (const std::string& c : candidates) {
      const std::size_t d = c.compare(0, word.size(), word) == 0 && word.size() > 3 ? 1 : EditDistance(word, c);
      if (d < best_distance) best_distance = d, best = c;
    }
    if (!best.empty() && best != word) hints += "fedrt: '" + word + "': did you mean '" + best + "'?\n";
  }
  return hints;
}

}  // namespace

int main(int argc, char** argv) {
  RestartWithBetterOpenBlasKernels(argv);
  if (argc > 0) KeepProcessName(argv[0]);
  fedrt::cli::RememberCommandLine(argc, argv);
  CLI::App app{"fedrt: federated training on edge devices", "fedrt"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", std::string("fedrt ") + fedrt::VersionString());
  app.fallthrough(false);

  fedrt::cli::CommandList commands;
  fedrt::cli::RegisterInfo(app, commands);
  fedrt::cli::RegisterCodec(app, commands);
  fedrt::cli::RegisterBench(app, commands);
  fedrt::cli::RegisterFleetBench(app, commands);
  fedrt::cli::RegisterTrain(app, commands);
  fedrt::cli::RegisterModel(app, commands);
  fedrt::cli::RegisterPeer(app, commands);
  fedrt::cli::RegisterServe(app, commands);
  fedrt::cli::RegisterDevice(app, commands);
  fedrt::cli::RegisterSim(app, commands);
  fedrt::cli::RegisterKeygen(app, commands);
  // The long-running commands log with timestamps at a chosen level.
  const std::vector<std::string> long_running = {"serve", "device", "peer", "sim", "train"};
  for (const std::string& name : long_running) fedrt::cli::AddLogLevelFlag(*app.get_subcommand(name));

  // --config files become flags before parsing, so they are checked alike.
  std::vector<std::string> args(argv + 1, argv + argc);
  const fedrt::Status expanded = fedrt::cli::ExpandJsonConfig(&args, {"serve", "device", "peer"});
  if (!expanded.ok()) {
    std::fprintf(stderr, "fedrt: %s\n", expanded.ToString().c_str());
    return kUsageError;
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
  try {
    app.parse(args);
  } catch (const CLI::ParseError& error) {
    // --help and --version are "errors" with exit code 0.
    if (error.get_exit_code() == 0) return app.exit(error);
    std::fprintf(stderr, "fedrt: %s\n%sRun with --help for more information.\n", error.what(),
                 Suggestion(app, error.what()).c_str());
    return kUsageError;
  }
  for (const fedrt::cli::Command& command : commands) {
    if (!command.app->parsed()) continue;
    if (std::find(long_running.begin(), long_running.end(), command.app->get_name()) != long_running.end()) {
      fedrt::cli::StartLogging(*command.app);
    }
    const int status = command.run();
    // A command stopped by a signal never reports success.
    const int signal = fedrt::cli::StopSignal();
    return status == 0 && signal != 0 ? 128 + signal : status;
  }
  std::fputs(app.help().c_str(), stdout);
  return 0;
}
