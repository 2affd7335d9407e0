#include "client/commands.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>

#include "client/certs_command.h"
#include "client/command_groups.h"
#include "client/health_command.h"
#include "client/job_commands.h"
#include "client/ui_command.h"
#include "core/metrics/families.h"
#include "core/util/files.h"

namespace baton {
namespace {

// `text` as one word for /bin/sh: single-quoted, each ' as '\''.
std::string ShellQuoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// What `baton-tools FLAG` prints on stdout; empty when it cannot be run or fails.
std::string ToolsOutput(const std::string& flag) {
  const std::string command = ShellQuoted(ToolsBinary()) + " " + flag + " 2>/dev/null";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  std::string text;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) text.append(buffer, n);
  return ::pclose(pipe) == 0 ? text : "";
}

// Each model tool's name and summary, as `baton-tools --commands` lists them (empty when it cannot be run).
std::map<std::string, std::string> ToolSummaries() {
  std::map<std::string, std::string> out;
  for (absl::string_view line : absl::StrSplit(ToolsOutput("--commands"), '\n', absl::SkipEmpty())) {
    std::pair<std::string, std::string> name_summary = absl::StrSplit(line, absl::MaxSplits('\t', 1));
    out.insert(std::move(name_summary));
  }
  return out;
}

// The top-level usage: this binary's commands, and the model tools' as baton-tools lists them.
std::string Usage(bool all) {
  std::map<std::string, std::string> summaries = ToolSummaries();
  const bool tools_found = !summaries.empty();
  for (const Command& c : ClientCommands()) summaries[c.name] = c.summary;
  std::string usage = TopLevelUsage(summaries, all);
  if (!tools_found) {
    usage += absl::StrCat("\nThe model tools (sample, plan, lora-convert, ...) run in ", ToolsBinary(),
                          ", which is not there: this is a client-only install.\n");
  }
  return usage;
}

// A name the help groups list that is not one of this binary's commands (RunClient looks for those first).
bool IsTool(const std::string& name) {
  for (const CommandGroup& group : CommandGroups()) {
    if (std::find(group.names.begin(), group.names.end(), name) != group.names.end()) return true;
  }
  return false;
}

// Replaces this process by baton-tools with the same arguments; returns only when that fails.
int ExecTool(const std::vector<std::string>& argv) {
  const std::string tools = ToolsBinary();
  std::vector<std::string> args = {tools};
  args.insert(args.end(), argv.begin(), argv.end());
  std::vector<char*> c_args;
  for (std::string& a : args) c_args.push_back(a.data());
  c_args.push_back(nullptr);
  std::fflush(nullptr);
  ::execv(tools.c_str(), c_args.data());
  std::fprintf(stderr, "baton %s: a model tool, run by %s, which cannot be run (%s): install it beside baton\n",
               argv[0].c_str(), tools.c_str(), std::strerror(errno));
  return 1;
}

}  // namespace

const std::vector<Command>& ClientCommands() {
  static const auto* commands = [] {
    auto* all = new std::vector<Command>(JobCommands());
    for (Command c : {UiCommand(), HealthCommand(), CertsCommand()}) all->push_back(std::move(c));
    return all;
  }();
  return *commands;
}

int RunCommand(const Command& c, const std::vector<std::string>& flags) {
  auto args = Args::Parse(flags, c.flags);
  if (!args.ok()) {
    std::fprintf(stderr, "baton %s: %s\n%s", c.name.c_str(), std::string(args.status().message()).c_str(),
                 Args::Usage(c.name, c.summary, c.flags).c_str());
    return 2;
  }
  if (args->help()) {
    std::fputs(Args::Usage(c.name, c.summary, c.flags).c_str(), stdout);
    return 0;
  }
  absl::Status status = c.run(*args);
  if (!status.ok()) {
    std::fprintf(stderr, "baton %s: %s\n", c.name.c_str(), status.ToString().c_str());
    return 1;
  }
  return 0;
}

std::string ToolsBinary() {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  const std::string exe = n > 0 ? std::string(self, static_cast<size_t>(n)) : "baton";
  return JoinPath(DirName(exe), "baton-tools");
}

int RunClient(const std::vector<std::string>& argv) {
  if (argv.size() == 1 && argv[0] == "--version") {  // as every Baton binary answers it
    const std::string tools = ToolsOutput("--version");
    std::printf("baton %s (no libtorch)\nbaton-tools: %s", BatonVersion().c_str(),
                tools.empty() ? "not installed beside baton\n" : tools.c_str());
    return 0;
  }
  if (argv.empty()) {
    std::fputs(Usage(false).c_str(), stderr);
    return 2;
  }
  if (argv[0] == "--help" || argv[0] == "-h" || argv[0] == "help") {
    const bool all = argv.size() > 1 && (argv[1] == "--all" || argv[1] == "-a");
    std::fputs(Usage(all).c_str(), stdout);
    return 0;
  }
  for (const Command& c : ClientCommands()) {
    if (c.name == argv[0]) return RunCommand(c, std::vector<std::string>(argv.begin() + 1, argv.end()));
  }
  if (IsTool(argv[0])) return ExecTool(argv);
  std::fprintf(stderr, "baton: unknown command '%s'\n%s", argv[0].c_str(), Usage(false).c_str());
  return 2;
}

}  // namespace baton
