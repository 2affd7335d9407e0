// A bigger image dataset for encoder tests: each picture of the bundled data/sample copied `copies` times as
// STEM_K.png with its caption plus ", take K", so there are enough samples to split over several encoder workers.
#pragma once

#include <absl/status/statusor.h>

#include <string>
#include <vector>

namespace baton::test_util {

// Writes into `dir` (created); returns the image file names written, in the order written.
absl::StatusOr<std::vector<std::string>> WriteSampleCopies(const std::string& dir, int copies);

}  // namespace baton::test_util
