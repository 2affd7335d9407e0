// The CUDA caching allocator's settings a Baton process on a GPU starts with. Expandable segments: a stage's
// activations change size with every resolution bucket, and fixed segments fragment (reserved climbing far above
// allocated until an out-of-memory at a step that fits); PyTorch recommends the setting for exactly this.
#pragma once

namespace baton {

// Sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True unless the user has set PYTORCH_CUDA_ALLOC_CONF (theirs is
// kept whole). Call before anything touches CUDA's allocator (the first thing in a main). Returns the value in force.
const char* PreferExpandableSegments();

}  // namespace baton
