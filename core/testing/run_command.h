// Runs a shell command for a test and returns its exit code and output. Integration tests use it to start
// Baton's binaries exactly as a user would.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <utility>

namespace baton::test_util {

struct CommandResult {
  int exit_code = -1;  // -1 when the command did not exit normally (signal, popen failure)
  std::string output;  // stdout, plus stderr when asked for
};

// Runs `command` under /bin/sh. With `with_stderr` the output holds stderr too (else stderr is discarded).
inline CommandResult RunCommand(const std::string& command, bool with_stderr = false) {
  CommandResult result;
  FILE* pipe = popen((command + (with_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  if (!pipe) return result;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) result.output.append(buf, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace baton::test_util
