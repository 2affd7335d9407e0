// baton: the user's command line, without libtorch. Everything lives in baton_client_lib; this only hands over argv
// (a model tool goes on in baton-tools: client/commands.h).
#include <string>
#include <vector>

#include "client/commands.h"

int main(int argc, char** argv) { return baton::RunClient(std::vector<std::string>(argv + 1, argv + argc)); }
