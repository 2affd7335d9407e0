// A process's SIGINT and SIGTERM, as every main installs them: the first asks the process to stop (it finishes what it
// is doing, saves what it holds and returns); with SecondSignal::kExits a second one exits at once with 128 + signal.
// Only mains install them and read the flags; libraries are handed the flag (a stop hook), never this state.
#pragma once

#include <atomic>

namespace baton {

struct StopFlags {
  std::atomic<bool> stop{false};
  std::atomic<int> signal{0};  // the first signal's number, with SecondSignal::kExits (0: none yet)
};

enum class SecondSignal {
  kStops,  // a server: every signal only asks it to stop (it stops within its own grace period)
  kExits,  // a one-shot run: the second signal is the user insisting; exit at once with 128 + signal
};

// Installs the handlers (again: the second mode wins) and returns the process's flags.
StopFlags& InstallStopSignals(SecondSignal second);

}  // namespace baton
