#include "core/tensor/torch_call.h"

#include <absl/strings/str_cat.h>
#include <c10/util/Exception.h>

#include <new>
#include <string>

#include "core/util/status.h"

namespace baton {

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

}  // namespace baton
