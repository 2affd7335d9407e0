// `baton sample`: try an adapter without Python -- one image from a prompt with FLUX.2's sampler, in this process or
// through N local stage workers (--stages N) for models that do not fit one device.
#pragma once

#include <absl/status/status.h>

#include "client/args.h"

namespace baton {

absl::Status Sample(const Args& args);

}  // namespace baton
