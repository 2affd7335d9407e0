// A small command-line parser for subcommands: `--name value`, `--name=value` and boolean `--name`; a flag
// declared with hyphens may be spelled with underscores (`--input_ids` is `--input-ids`).
// Each command declares its flags with help text; unknown flags and missing required ones are errors, and
// `--help` prints the declared flags. (absl::flags is process-global, which suits one-command binaries,
// not a multi-command client.)
#pragma once

#include <absl/status/statusor.h>

#include <map>
#include <string>
#include <vector>

namespace baton {

struct FlagSpec {
  std::string name;
  std::string help;
  std::string default_value;  // "" = none
  bool required = false;
  bool boolean = false;
  // A bare argument (`baton submit JOB.yaml`): bare arguments fill the positional specs in order; Get(name)
  // reads them like flags.
  bool positional = false;
};

class Args {
 public:
  // Parses argv (after the subcommand). Returns InvalidArgument for unknown or malformed flags.
  static absl::StatusOr<Args> Parse(const std::vector<std::string>& argv, const std::vector<FlagSpec>& specs);
  static std::string Usage(const std::string& command, const std::string& summary, const std::vector<FlagSpec>& specs);

  bool help() const { return help_; }
  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::string Get(const std::string& name) const;
  absl::StatusOr<int64_t> GetInt(const std::string& name) const;
  absl::StatusOr<double> GetDouble(const std::string& name) const;
  bool GetBool(const std::string& name) const;

 private:
  std::map<std::string, std::string> values_;
  bool help_ = false;
};

}  // namespace baton
