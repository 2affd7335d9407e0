// `baton quantize`: writes a pre-quantized copy of a FLUX.2 checkpoint (core/model/quantize_checkpoint.h)
// that stages load without quantizing again.
#pragma once

#include "client/commands.h"

namespace baton {

Command QuantizeCommand();

}  // namespace baton
