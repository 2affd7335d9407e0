#include "core/util/stop_signals.h"

#include <unistd.h>

#include <csignal>

namespace baton {
namespace {

StopFlags g_flags;  // process-wide by nature: a signal handler has nowhere else to write
std::atomic<bool> g_second_exits{false};

void OnStopSignal(int sig) {
  if (g_second_exits) {
    if (g_flags.signal.exchange(sig) != 0) _exit(128 + sig);
  }
  g_flags.stop = true;
}

}  // namespace

StopFlags& InstallStopSignals(SecondSignal second) {
  g_second_exits = second == SecondSignal::kExits;
  std::signal(SIGTERM, OnStopSignal);
  std::signal(SIGINT, OnStopSignal);
  return g_flags;
}

}  // namespace baton
