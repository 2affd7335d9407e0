// FLUX.2 reference images (editing) on the encoder's side: a control folder beside the dataset (encoder_worker
// --control DIR; job key encode.control), in musubi-tuner's control_directory layout, which ai-toolkit's control_path
// shares for one reference: for the image cat.jpg, the control folder holds cat.png (one reference) or cat_0.png,
// cat_1.png, ... (several, in the order of their numbers, at most kMaxReferences); any of .png, .jpg, .jpeg. A sample
// without any trains without references. Each reference is resized and cropped to its image's bucket, so a record's
// references are the target's size (docs/jobs.md says why).
#pragma once

#include <absl/status/statusor.h>

#include <string>
#include <vector>

namespace baton {

// The reference files of the sample image `image_name` among the control folder's file names (sorted), in order:
// empty when it has none. InvalidArgument naming the files when the layout is ambiguous (cat.png and cat_0.png; two
// files of one number) or there are more than kMaxReferences.
absl::StatusOr<std::vector<std::string>> FindReferenceFiles(const std::string& image_name,
                                                            const std::vector<std::string>& control_names);

}  // namespace baton
