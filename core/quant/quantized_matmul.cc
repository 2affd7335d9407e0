#include "core/quant/quantized_matmul.h"

#include <torch/csrc/autograd/custom_function.h>

#include "core/quant/quantize_tensor.h"

namespace baton {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class QuantizedMatmulFn : public torch::autograd::Function<QuantizedMatmulFn> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& data, const at::Tensor& scale,
                            int64_t dtype) {
    ctx->save_for_backward({data, scale});  // 8-bit: 1 byte per weight element stays alive, not 2 or 4
    ctx->saved_data["dtype"] = dtype;
    return at::matmul(x, DequantizeWeight(data, scale, static_cast<at::ScalarType>(dtype)).t());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    at::Tensor grad_x = at::matmul(grad_outputs[0], DequantizeWeight(saved[0], saved[1], dtype));
    return {grad_x, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor QuantizedMatmul(const at::Tensor& x, const at::Tensor& data, const at::Tensor& scale, at::ScalarType dtype) {
  return QuantizedMatmulFn::apply(x, data, scale, static_cast<int64_t>(dtype));
}

}  // namespace baton
