#include "cli/signals.h"

#include <csignal>

namespace fedrt::cli {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_signal{0};

void OnSignal(int signal) {
  g_signal.store(signal);
  g_stop.store(true);
}

}  // namespace

std::atomic<bool>* CatchStopSignals() {
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  return &g_stop;
}

int StopSignal() { return g_signal.load(); }

}  // namespace fedrt::cli
