#include "tools/command_server.h"

#include <absl/strings/str_cat.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/tool_commands.h"

namespace baton {
namespace {

// Points `fd` at `path` (created, truncated); returns the descriptor it had, to restore, or -1 on failure.
int RedirectTo(int fd, const std::string& path) {
  const int file = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (file < 0) return -1;
  const int saved = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);  // not inherited by what the command starts
  ::dup2(file, fd);
  ::close(file);
  return saved;
}

void Restore(int fd, int saved) {
  if (saved < 0) return;
  ::dup2(saved, fd);
  ::close(saved);
}

// One request: the command's exit code, or 2 with the reason on `answers` when the request is malformed.
int Serve(const std::string& line, FILE* answers) {
  auto request = nlohmann::json::parse(line, nullptr, false);
  if (request.is_discarded() || !request.contains("args") || !request["args"].is_array() ||
      !request.value("stdout", nlohmann::json()).is_string() ||
      !request.value("stderr", nlohmann::json()).is_string()) {
    std::fprintf(answers, "%s\n",
                 nlohmann::json{{"rc", 2}, {"error", "expected {args: [...], stdout, stderr}"}}.dump().c_str());
    std::fflush(answers);
    return 2;
  }
  std::vector<std::string> args;
  for (const auto& a : request["args"]) args.push_back(a.is_string() ? a.get<std::string>() : a.dump());
  if (!args.empty() && args[0] == "command-server") args = {"command-server", "--help"};  // never nested
  std::fflush(stdout);
  std::fflush(stderr);
  const int saved_out = RedirectTo(STDOUT_FILENO, request["stdout"].get<std::string>());
  const int saved_err = RedirectTo(STDERR_FILENO, request["stderr"].get<std::string>());
  int rc = 2;
  if (saved_out >= 0 && saved_err >= 0) rc = RunTool(args);
  std::cout.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  Restore(STDOUT_FILENO, saved_out);
  Restore(STDERR_FILENO, saved_err);
  nlohmann::json answer{{"rc", rc}};
  if (saved_out < 0 || saved_err < 0) answer["error"] = "cannot open the stdout or stderr file";
  std::fprintf(answers, "%s\n", answer.dump().c_str());
  std::fflush(answers);
  return rc;
}

absl::Status RunCommandServer(const Args&) {
  // Answers go to a copy of the original stdout: the commands' own stdout is redirected to their files.
  FILE* answers = ::fdopen(::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 0), "w");
  if (answers == nullptr) return absl::InternalError("command-server: cannot duplicate stdout");
  for (std::string line; std::getline(std::cin, line);) {
    if (!line.empty()) Serve(line, answers);
  }
  std::fclose(answers);
  return absl::OkStatus();
}

}  // namespace

Command CommandServerCommand() {
  return {"command-server",
          "Run baton commands read from stdin, one JSON line each ({\"args\": [...], \"stdout\": FILE, \"stderr\": "
          "FILE}), in this one process; answers {\"rc\": N} per line (the upstream referees: one start-up per test "
          "file instead of per command).",
          {},
          RunCommandServer};
}

}  // namespace baton
