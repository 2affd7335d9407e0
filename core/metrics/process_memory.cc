#include "core/metrics/process_memory.h"

#include <absl/strings/str_cat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace baton {

int64_t ResidentMemoryBytes(pid_t pid) {
  const std::string path = pid == 0 ? "/proc/self/statm" : absl::StrCat("/proc/", pid, "/statm");
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return -1;
  long long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lld %lld", &size, &resident);
  std::fclose(f);
  if (n != 2) return -1;
  return static_cast<int64_t>(resident) * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
}

}  // namespace baton
