#include "client/command_groups.h"

#include <absl/strings/str_format.h>

namespace baton {

const std::vector<CommandGroup>& CommandGroups() {
  static const auto* groups = new std::vector<CommandGroup>{
      {"Jobs on a job service (coordinator --listen; the browser view: baton ui)",
       {"submit", "watch", "list", "status", "stop", "continue", "checkpoints", "download", "ui"}},
      {"LoRAs, samples and plans", {"sample", "lora-convert", "plan", "schedule", "train-local", "quantize"}},
      {"Set-up", {"certs", "health", "init-weights"}},
      {"Low-level tools (the upstream referee tests and debugging drive them)",
       {"forward", "step-grads", "text-encode", "tokenize", "vae-encode", "vae-decode", "decode-image",
        "clip-encode-image", "write-video", "sample-timesteps", "scheduler-replay", "synthetic-cache", "lr-schedule",
        "optimizer-replay", "command-server"},
       /*plumbing=*/true},
  };
  return *groups;
}

std::string TopLevelUsage(const std::map<std::string, std::string>& summaries, bool all) {
  std::string out = "usage: baton <command> [flags]   (baton <command> --help for its flags)\n";
  size_t hidden = 0;
  for (const CommandGroup& group : CommandGroups()) {
    if (group.plumbing && !all) {
      hidden += group.names.size();
      continue;
    }
    out += "\n" + group.title + ":\n";
    for (const std::string& name : group.names) {
      auto it = summaries.find(name);
      out += absl::StrFormat("  %-18s %s\n", name, it == summaries.end() ? "" : it->second);
    }
  }
  if (hidden > 0) out += absl::StrFormat("\n%d low-level tools more: baton help --all\n", hidden);
  return out;
}

}  // namespace baton
