// A full disk on demand, for tests (leveldb's fake-Env habit): every file Baton writes goes through
// WriteFileAtomic or a JsonlWriter, and both ask WriteFault first. A test sets a fault that answers an error for
// the write it wants to fail (e.g. the third lora.safetensors); production never sets one, and the check is one
// relaxed atomic load.
#pragma once

#include <absl/status/status.h>

#include <functional>
#include <string>

namespace baton {

// Called with the path about to be written; a non-OK answer is reported as that write's failure.
using WriteFaultFn = std::function<absl::Status(const std::string& path)>;

// Installs `fault` (null removes it). Thread-safe.
void SetWriteFaultForTesting(WriteFaultFn fault);

// OK unless a fault is installed and answers an error for `path`.
absl::Status WriteFault(const std::string& path);

}  // namespace baton
