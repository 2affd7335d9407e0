// The flag prologue every Baton server binary runs in main: a symbolized stack trace on stderr if the process
// crashes (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP), its usage line, --version, --help listing its own
// flags, `--flag value` spellings normalised, then Abseil's parse.
#pragma once

#include <absl/strings/string_view.h>

#include <initializer_list>

namespace baton {

// `optional_value`: boolean flags that may also take a value (NormalizeFlagArgs, core/util/flags.h).
void ParseBinaryFlags(int argc, char** argv, const char* usage,
                      std::initializer_list<absl::string_view> optional_value = {});

}  // namespace baton
