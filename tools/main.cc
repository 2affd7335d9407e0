// baton-tools: the model tools of `baton` (tools/tool_commands.h), which `baton` executes with the same arguments.
// Everything lives in baton_tools_lib; this only hands over argv.
#include <cstdio>
#include <string>
#include <vector>

#include "core/device/allocator_settings.h"
#include "core/device/determinism.h"
#include "core/device/device.h"
#include "tools/tool_commands.h"

int main(int argc, char** argv) {
  baton::PrepareCudaDeterminismEnv();  // before anything initializes CUDA (train-local and sample may compute on it)
  baton::PreferExpandableSegments();
  if (argc == 2 && std::string(argv[1]) == "--version") {  // as every Baton binary answers it
    std::printf("%s\n", baton::BuildAndDeviceSummary().c_str());
    return 0;
  }
  return baton::RunTool(std::vector<std::string>(argv + 1, argv + argc));
}
