#include "core/device/binary_flags.h"

#include <absl/flags/parse.h>
#include <absl/flags/usage.h>

#include "core/device/device.h"
#include "core/util/flags.h"

namespace baton {

void ParseBinaryFlags(int argc, char** argv, const char* usage,
                      std::initializer_list<absl::string_view> optional_value) {
  absl::SetProgramUsageMessage(usage);
  InstallVersionFlag();
  InstallFlagsHelp();
  NormalizeFlagArgs(argc, argv, optional_value);
  absl::ParseCommandLine(argc, argv);
}

}  // namespace baton
