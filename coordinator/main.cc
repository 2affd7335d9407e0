// coordinator: filled in by a later issue. Until then it says so and fails, rather than pretend.
#include <cstdio>

int main() {
  std::fprintf(stderr, "coordinator: not implemented yet\n");
  return 2;
}
