#include "core/text/text_weights.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>

#include <utility>

#include "core/quant/eight_bit_linear.h"
#include "core/tensor/torch_call.h"
#include "core/util/status.h"

namespace baton {

at::Tensor TextLinear(const at::Tensor& x, const TextWeight& w, const at::Tensor& bias) {
  if (w.full.defined()) return at::linear(x, w.full, bias);
  return EightBitLinear(x, w.eight_bit, bias);
}

bool IsTextEncoderLinearWeight(const TextEncoderTensorSpec& spec) {
  return spec.shape.size() == 2 && absl::EndsWith(spec.name, ".weight") &&
         !absl::StrContains(spec.name, "relative_attention_bias") && !absl::StrContains(spec.name, "embed_tokens") &&
         spec.name != "shared.weight";
}

absl::StatusOr<QuantizedWeight> TextWeights::Resident(const TextEncoderTensorSpec& spec) {
  auto it = resident_.find(spec.name);
  if (it != resident_.end()) return it->second;
  // fp32 whatever the compute dtype (as LoadQuantizedWeights), one tensor at a time: the peak is this tensor in
  // fp32 and QuantizeWeight's temporaries, never a layer or the model in full precision.
  ASSIGN_OR_RETURN(std::vector<at::Tensor> full, checkpoint_->Load({spec}, at::kFloat));
  QuantizedWeight q;
  const std::string key = checkpoint_->Key(spec.name);
  RETURN_IF_ERROR(TorchCall(key.c_str(), [&] {
    q = QuantizeWeight(full[0], quant_);
    full.clear();
    q.data = q.data.to(device_);
    q.scale = q.scale.to(device_);
  }));
  resident_bytes_ += static_cast<int64_t>(q.data.nbytes() + q.scale.nbytes());
  resident_.emplace(spec.name, q);
  return q;
}

absl::StatusOr<std::vector<TextWeight>> TextWeights::Load(const std::vector<TextEncoderTensorSpec>& specs,
                                                          at::ScalarType dtype) {
  std::vector<TextWeight> out(specs.size());
  std::vector<TextEncoderTensorSpec> streamed;
  std::vector<size_t> streamed_at;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (quant_ != WeightQuant::kNone && IsTextEncoderLinearWeight(specs[i])) {
      ASSIGN_OR_RETURN(out[i].eight_bit, Resident(specs[i]));
    } else {
      streamed.push_back(specs[i]);
      streamed_at.push_back(i);
    }
  }
  if (streamed.empty()) return out;
  // Stored as computed: read in place from the mapping (a copy per call cost a third of a bf16 layer's time).
  ASSIGN_OR_RETURN(std::vector<at::Tensor> tensors, checkpoint_->View(streamed, dtype));
  for (size_t j = 0; j < tensors.size(); ++j) out[streamed_at[j]].full = std::move(tensors[j]);
  return out;
}

}  // namespace baton
