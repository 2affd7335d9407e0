// baton: the user's command line. Everything lives in baton_client_lib; this only hands over argv.
#include <string>
#include <vector>

#include "client/commands.h"
#include "core/device/determinism.h"

int main(int argc, char** argv) {
  baton::PrepareCudaDeterminismEnv();  // before anything initializes CUDA (train-local and sample may compute on it)
  return baton::RunClient(std::vector<std::string>(argv + 1, argv + argc));
}
