#include "rpc/frozen_key.h"

#include <absl/strings/str_cat.h>

namespace baton {

std::string FrozenWeightsKey(const v1::ConfigureRequest& req, const std::string& default_device) {
  if (req.offload_blocks() > 0) return "";  // its tensors' storage comes and goes (core/model/block_swap.h)
  std::string key = absl::StrCat(req.model_path(), "|", req.model_config_path(), "|", req.dtype(), "|", req.quantize(),
                                 "|", req.device().empty() ? default_device : req.device(), "|", req.block_begin(), ",",
                                 req.block_end(), ",", req.has_embedders(), req.has_head());
  for (const v1::StageChunk& c : req.chunks()) {
    absl::StrAppend(&key, "|", c.block_begin(), ",", c.block_end(), ",", c.has_embedders(), c.has_head());
  }
  return key;
}

}  // namespace baton
