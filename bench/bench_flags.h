// How every bench reads its command line: its ABSL_FLAGs (--help lists them), a flag's hyphens as underscores
// (--max-sequence-length), and nothing but flags.
#pragma once

#include <absl/flags/parse.h>
#include <absl/flags/usage.h>
#include <absl/status/status.h>
#include <absl/strings/str_cat.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/util/flags.h"

namespace baton {

// The bench's name (argv[0]'s last part), for BenchDie.
inline std::string& BenchName() {
  static std::string name = "bench";
  return name;
}

// "bench_pipeline: <what>" on stderr, and exit status 1.
[[noreturn]] inline void BenchDie(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", BenchName().c_str(), what.c_str());
  std::exit(1);
}

// InvalidArgument for an argument that is not a flag. Abseil itself exits on --help and on an unknown or malformed
// flag, naming it.
inline absl::Status ParseBenchFlags(int argc, char** argv, const char* usage) {
  const std::string program = argv[0];
  BenchName() = program.substr(program.find_last_of('/') + 1);
  absl::SetProgramUsageMessage(usage);
  InstallFlagsHelp();
  NormalizeFlagArgs(argc, argv);
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat("unexpected argument ", rest[1], " (--help lists the flags)"));
  }
  return absl::OkStatus();
}

}  // namespace baton
