#include "core/util/status.h"

namespace baton {

std::string StripTorchBacktrace(std::string what) {
  // c10::Error: "<message>\nException raised from <fn> at <file>:<line> (most recent call first):\nframe #0: ...";
  // some builds list frames without that line.
  for (const char* marker : {"\nException raised from", "\nframe #0"}) {
    if (auto pos = what.find(marker); pos != std::string::npos) what.resize(pos);
  }
  while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
  return what;
}

bool IsOutOfMemoryMessage(const std::string& what) {
  for (const char* marker : {"can't allocate memory", "not enough memory", "out of memory", "Cannot allocate memory"}) {
    if (what.find(marker) != std::string::npos) return true;
  }
  return false;
}

std::string FirstLine(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  if (line.size() > 300) line = line.substr(0, 300) + "...";
  return line;
}

}  // namespace baton
