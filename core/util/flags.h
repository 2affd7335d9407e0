// Makes a binary's `--help` list every flag Baton defines in it, with default and meaning. Abseil 20220623
// lists under --help only the flags of a file named after the program (coordinator.cc, ...); ours live in
// main.cc and libraries, so without this `--help` printed "No flags matched". Abseil's own flags (--flagfile,
// --fromenv, ...) stay under --helpfull.
#pragma once

#include <absl/strings/string_view.h>

#include <initializer_list>
#include <string>

namespace baton {

// True for a flag defined in Baton's sources, false for Abseil's own (defined under absl/).
bool IsBatonFlagFile(absl::string_view filename);

// A flag's defining file as printed by --help: relative to the source tree ("coordinator/main.cc").
std::string NormalizeFlagFile(absl::string_view filename);

// Installs both for --help and --helpshort. Call before absl::ParseCommandLine.
void InstallFlagsHelp();

// Rewrites argv in place before absl::ParseCommandLine so that a flag may be spelled with hyphens:
// `--model-root=x` ≡ `--model_root=x` (also `--no` + name for booleans). Only names that match a defined
// flag once hyphens become underscores are rewritten; values are untouched, unknown names are left for
// Abseil to reject, and nothing after a bare `--` is touched. `optional_value` names non-bool flags that
// may be given bare: `--NAME` alone (not followed by `=`) becomes `--NAME=true` and `--noNAME`
// becomes `--NAME=false` (Abseil needs a value for every non-bool flag).
void NormalizeFlagArgs(int argc, char** argv, std::initializer_list<absl::string_view> optional_value = {});

}  // namespace baton
