#include "core/util/status.h"

#include <c10/util/Exception.h>

#include <new>

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

absl::Status StatusFromCurrentException(const char* context) {
  try {
    throw;
  } catch (const c10::OutOfMemoryError& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat(context, ": out of memory: ", FirstLine(StripTorchBacktrace(e.what_without_backtrace()))));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(context, ": out of memory (host allocation failed)"));
  } catch (const c10::Error& e) {
    // libtorch's CPU allocator reports a failed allocation as a plain c10::Error ("can't allocate memory").
    std::string what = StripTorchBacktrace(e.what_without_backtrace());
    if (IsOutOfMemoryMessage(what)) {
      return absl::ResourceExhaustedError(absl::StrCat(context, ": out of memory: ", FirstLine(what)));
    }
    return absl::InternalError(absl::StrCat(context, ": ", what));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(context, ": ", StripTorchBacktrace(e.what())));
  } catch (...) {
    return absl::InternalError(absl::StrCat(context, ": unknown exception"));
  }
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
