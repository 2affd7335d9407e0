#include "client/args.h"

#include <absl/strings/match.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>

#include <algorithm>

namespace baton {

absl::StatusOr<Args> Args::Parse(const std::vector<std::string>& argv, const std::vector<FlagSpec>& specs) {
  Args args;
  std::map<std::string, const FlagSpec*> by_name;
  for (const auto& s : specs) by_name[s.name] = &s;
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      args.help_ = true;
      return args;
    }
    if (!absl::StartsWith(arg, "--")) {
      auto next = std::find_if(specs.begin(), specs.end(),
                               [&](const FlagSpec& s) { return s.positional && !args.values_.count(s.name); });
      if (next == specs.end()) return absl::InvalidArgumentError(absl::StrCat("unexpected argument '", arg, "'"));
      args.values_[next->name] = arg;
      continue;
    }
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    auto it = by_name.find(name);
    if (it == by_name.end()) {  // --max_sequence_length is --max-sequence-length, as the servers' flags take both
      std::string hyphenated = name;
      std::replace(hyphenated.begin(), hyphenated.end(), '_', '-');
      if ((it = by_name.find(hyphenated)) != by_name.end()) name = hyphenated;
    }
    if (it == by_name.end() || it->second->positional)
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    if (it->second->boolean) {
      if (!has_value) value = "true";
    } else if (!has_value) {
      if (i + 1 >= argv.size()) return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      value = argv[++i];
    }
    args.values_[name] = value;
  }
  for (const auto& s : specs) {
    if (!args.values_.count(s.name)) {
      if (s.required) {
        return absl::InvalidArgumentError(
            absl::StrCat(s.positional ? "" : "--", s.name, " is required (", s.help, ")"));
      }
      if (!s.default_value.empty()) args.values_[s.name] = s.default_value;
    }
  }
  return args;
}

std::string Args::Usage(const std::string& command, const std::string& summary, const std::vector<FlagSpec>& specs) {
  std::string positionals;
  for (const auto& s : specs) {
    if (s.positional) absl::StrAppend(&positionals, " ", s.required ? "" : "[", s.name, s.required ? "" : "]");
  }
  std::string out = absl::StrCat("usage: baton ", command, positionals, " [flags]\n  ", summary, "\n");
  for (const auto& s : specs) {
    if (s.positional) {
      absl::StrAppend(&out, "  ", s.name, "  ", s.help, "\n");
      continue;
    }
    absl::StrAppend(&out, "  --", s.name, s.boolean ? "" : " VALUE", "  ", s.help);
    if (s.required) absl::StrAppend(&out, " (required)");
    if (!s.default_value.empty()) absl::StrAppend(&out, " [default ", s.default_value, "]");
    absl::StrAppend(&out, "\n");
  }
  return out;
}

std::string Args::Get(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? "" : it->second;
}

absl::StatusOr<int64_t> Args::GetInt(const std::string& name) const {
  int64_t v;
  if (!absl::SimpleAtoi(Get(name), &v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " must be an integer, got '", Get(name), "'"));
  }
  return v;
}

absl::StatusOr<double> Args::GetDouble(const std::string& name) const {
  double v;
  if (!absl::SimpleAtod(Get(name), &v)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, " must be a number, got '", Get(name), "'"));
  }
  return v;
}

bool Args::GetBool(const std::string& name) const {
  std::string v = Get(name);
  return v == "true" || v == "1" || v == "yes";
}

}  // namespace baton
