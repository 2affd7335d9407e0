// baton: the user's command line. Everything lives in baton_client_lib; this only hands over argv.
#include <cstdio>
#include <string>
#include <vector>

#include "client/commands.h"
#include "core/device/determinism.h"
#include "core/device/device.h"

int main(int argc, char** argv) {
  baton::PrepareCudaDeterminismEnv();  // before anything initializes CUDA (train-local and sample may compute on it)
  if (argc == 2 && std::string(argv[1]) == "--version") {  // as every Baton binary answers it
    std::printf("%s\n", baton::BuildAndDeviceSummary().c_str());
    return 0;
  }
  return baton::RunClient(std::vector<std::string>(argv + 1, argv + argc));
}
