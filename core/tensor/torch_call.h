// libtorch reports errors by throwing (c10::Error, c10::OutOfMemoryError, std::bad_alloc); TorchCall() turns that into
// a Status at the edges where untrusted input reaches libtorch.
#pragma once

#include <absl/base/thread_annotations.h>
#include <absl/status/status.h>

#include <exception>

namespace baton {

// The status for the exception being handled (call only inside a catch block): out of memory
// (c10::OutOfMemoryError, std::bad_alloc, libtorch's CPU allocator failing) is RESOURCE_EXHAUSTED with one short
// line, anything else INTERNAL; `context` prefixes the message, which never carries a libtorch backtrace.
absl::Status StatusFromCurrentException(const char* context);

// Runs fn(); a thrown exception becomes StatusFromCurrentException(context). fn runs at once on the caller's
// thread, so the locks fn requires (a lambda's ABSL_EXCLUSIVE_LOCKS_REQUIRED) are the caller's to hold.
template <typename Fn>
absl::Status TorchCall(const char* context, Fn&& fn) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  try {
    fn();
    return absl::OkStatus();
  } catch (...) {
    return StatusFromCurrentException(context);
  }
}

}  // namespace baton
