#include "core/device/binary_flags.h"

#include <absl/debugging/failure_signal_handler.h>
#include <absl/debugging/symbolize.h>
#include <absl/flags/parse.h>
#include <absl/flags/usage.h>
#include <signal.h>

#include "core/device/device.h"
#include "core/util/flags.h"

namespace baton {
namespace {

void InstallCrashStackTraces(const char* argv0) {
  absl::InitializeSymbolizer(argv0);
  // absl's handler also takes SIGTERM; a daemon's SIGTERM stays what it was (default, or the main's own handler
  // installed afterwards): a stop request is not a crash and prints no stack.
  struct sigaction term;
  ::sigaction(SIGTERM, nullptr, &term);
  absl::FailureSignalHandlerOptions options;
  options.call_previous_handler = true;
  absl::InstallFailureSignalHandler(options);
  ::sigaction(SIGTERM, &term, nullptr);
}

}  // namespace

void ParseBinaryFlags(int argc, char** argv, const char* usage,
                      std::initializer_list<absl::string_view> optional_value) {
  InstallCrashStackTraces(argv[0]);
  absl::SetProgramUsageMessage(usage);
  InstallVersionFlag();
  InstallFlagsHelp();
  NormalizeFlagArgs(argc, argv, optional_value);
  absl::ParseCommandLine(argc, argv);
}

}  // namespace baton
