#include "core/quant/eight_bit_linear.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <absl/strings/str_cat.h>
#include <c10/util/Float8_e4m3fn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>

namespace baton {
namespace {

std::atomic<EightBitGemm> g_gemm{EightBitGemm::kDequantize};

// The fp32 value of every byte pattern of the storage dtype (exact: int8 and e4m3 values are all fp32 values).
std::array<float, 256> ValueTable(at::ScalarType storage) {
  std::array<float, 256> table{};
  for (int b = 0; b < 256; ++b) {
    const auto byte = static_cast<uint8_t>(b);
    if (storage == at::kChar) {
      int8_t v;
      std::memcpy(&v, &byte, 1);
      table[b] = static_cast<float>(v);
    } else {
      table[b] = static_cast<float>(c10::Float8_e4m3fn(byte, c10::Float8_e4m3fn::from_bits()));
    }
  }
  return table;
}

// out[r, c] = scalar_t(table[data[r, c]] · scale[r]): the fp32 product rounded once, as DequantizeWeight.
template <typename scalar_t>
void DequantizeRows(const uint8_t* data, const float* scale, const std::array<float, 256>& table, int64_t cols,
                    int64_t begin, int64_t end, scalar_t* out) {
  for (int64_t r = begin; r < end; ++r) {
    const uint8_t* src = data + r * cols;
    scalar_t* dst = out + r * cols;
    const float s = scale[r];
    for (int64_t c = 0; c < cols; ++c) dst[c] = static_cast<scalar_t>(table[src[c]] * s);
  }
}

// The same for int8 in blocks of rows small enough to stay in cache, each step one of libtorch's vectorized kernels
// (int8 converts to fp32 exactly): 1.4x faster than the table at Mistral-3's widths. e4m3 keeps the table (libtorch's
// fp8 conversion measured slower than it).
void DequantizeInt8Rows(const at::Tensor& data, const at::Tensor& scale, int64_t begin, int64_t end, at::Tensor& out) {
  const int64_t block = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, data.size(1)));
  for (int64_t r = begin; r < end; r += block) {
    const int64_t n = std::min(block, end - r);
    at::Tensor rows = data.narrow(0, r, n).to(at::kFloat);
    rows.mul_(scale.narrow(0, r, n).unsqueeze(1));
    out.narrow(0, r, n).copy_(rows);
  }
}

}  // namespace

void SetEightBitGemm(EightBitGemm gemm) { g_gemm.store(gemm); }
EightBitGemm GetEightBitGemm() { return g_gemm.load(); }

absl::StatusOr<EightBitGemm> ParseEightBitGemm(const std::string& name) {
  if (name == "dequantize") return EightBitGemm::kDequantize;
  if (name == "int8pack") return EightBitGemm::kInt8Pack;
  return absl::InvalidArgumentError(absl::StrCat("unknown 8-bit GEMM '", name, "' (allowed: dequantize, int8pack)"));
}

at::Tensor DequantizeWeightFast(const at::Tensor& data, const at::Tensor& scale, at::ScalarType dtype) {
  const bool table_kind = data.scalar_type() == at::kChar || data.scalar_type() == at::kFloat8_e4m3fn;
  if (!data.device().is_cpu() || !scale.device().is_cpu() || data.dim() != 2 || !table_kind ||
      scale.scalar_type() != at::kFloat || !at::isFloatingType(dtype)) {
    return DequantizeWeight(data, scale, dtype);
  }
  static const std::array<float, 256> kInt8 = ValueTable(at::kChar);
  static const std::array<float, 256> kFp8 = ValueTable(at::kFloat8_e4m3fn);
  const std::array<float, 256>& table = data.scalar_type() == at::kChar ? kInt8 : kFp8;
  const at::Tensor s = scale.contiguous();
  const int64_t rows = data.size(0), cols = data.size(1);
  at::Tensor out = at::empty({rows, cols}, data.options().dtype(dtype));
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, cols));
  if (data.scalar_type() == at::kChar) {
    const at::Tensor d = data.contiguous();
    at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) { DequantizeInt8Rows(d, s, begin, end, out); });
    return out;
  }
  const at::Tensor bytes = data.contiguous().view(at::kByte);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, dtype, "DequantizeWeightFast", [&] {
    const uint8_t* src = bytes.data_ptr<uint8_t>();
    const float* sp = s.data_ptr<float>();
    scalar_t* dst = out.data_ptr<scalar_t>();
    at::parallel_for(0, rows, grain,
                     [&](int64_t begin, int64_t end) { DequantizeRows(src, sp, table, cols, begin, end, dst); });
  });
  return out;
}

at::Tensor EightBitLinear(const at::Tensor& x, const QuantizedWeight& w, const at::Tensor& bias) {
  if (g_gemm.load() == EightBitGemm::kInt8Pack && x.device().is_cpu() && w.data.device().is_cpu() &&
      w.data.scalar_type() == at::kChar && x.scalar_type() == at::kBFloat16) {
    const int64_t in = x.size(-1), out = w.data.size(0);
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = out;
    at::Tensor y =
        at::_weight_int8pack_mm(x.reshape({-1, in}).contiguous(), w.data.contiguous(), w.scale.to(at::kBFloat16))
            .view(shape);
    return bias.defined() ? y + bias : y;
  }
  return at::linear(x, DequantizeWeightFast(w.data, w.scale, x.scalar_type()), bias);
}

}  // namespace baton
