#include "wire/wire_compression.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "wire/wire.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

// Sends `t` through the real chunk codec with `dtype` and reassembles it; also reports the payload bytes.
absl::StatusOr<at::Tensor> RoundTrip(const at::Tensor& t, WireDtype dtype, uint64_t* wire_bytes = nullptr,
                                     uint64_t cap = uint64_t{1} << 30) {
  std::vector<v1::TensorChunk> chunks;
  absl::Status sent = AppendTensorChunks(
      "act", t, /*max_chunk_bytes=*/4096,
      [&](v1::TensorChunk&& c) {
        chunks.push_back(std::move(c));
        return true;
      },
      dtype);
  if (!sent.ok()) return sent;
  if (wire_bytes) *wire_bytes = chunks.front().header().total_bytes();
  TensorAssembler assembler(cap);
  for (const v1::TensorChunk& c : chunks) {
    absl::StatusOr<std::optional<NamedTensor>> r = assembler.Add(c);
    if (!r.ok()) return r.status();
    if (r->has_value()) return (*r)->tensor;
  }
  return absl::InternalError("no tensor completed");
}

// An activation-like tensor: per-token magnitudes spanning 3 orders, so per-token scales matter.
at::Tensor Activation() {
  at::manual_seed(3);
  at::Tensor magnitude = at::pow(10.0, at::linspace(-2, 1, 80)).reshape({1, 80, 1});
  return at::randn({1, 80, 96}) * magnitude;
}

TEST(WireCompression, Bf16HalvesTheBytesAndRoundsLikeACast) {
  at::Tensor x = Activation();
  uint64_t bytes = 0;
  absl::StatusOr<at::Tensor> y = RoundTrip(x, WireDtype::kBf16, &bytes);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->scalar_type(), at::kFloat);
  EXPECT_EQ(bytes, static_cast<uint64_t>(x.numel()) * 2);
  EXPECT_TRUE(at::equal(*y, x.to(at::kBFloat16).to(at::kFloat)));
}

TEST(WireCompression, Fp8QuartersTheBytesWithinItsRoundingPerToken) {
  at::Tensor x = Activation();
  uint64_t bytes = 0;
  absl::StatusOr<at::Tensor> y = RoundTrip(x, WireDtype::kFp8, &bytes);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->scalar_type(), at::kFloat);
  EXPECT_EQ(bytes, static_cast<uint64_t>(x.numel()));
  // e4m3 keeps 3 mantissa bits: relative error <= 1/16 for normal values; below 2^-6 of the row's range
  // (subnormals) the error is absolute, <= 2^-9 of the row's scale.
  at::Tensor row_scale = x.abs().amax(-1, /*keepdim=*/true) / 448.0;
  at::Tensor bound = x.abs() / 16.0 + row_scale * (1.0 / 512.0) + 1e-12;
  EXPECT_TRUE(((*y - x).abs() <= bound).all().item<bool>()) << ((*y - x).abs() / bound).max();
  // Per-token scales: the smallest tokens keep their relative precision (one scale for all would flush them).
  at::Tensor small = x.narrow(1, 0, 8), small_y = y->narrow(1, 0, 8);
  EXPECT_LT(((small_y - small).norm() / small.norm()).item<double>(), 0.05);
}

TEST(WireCompression, Fp8IsDeterministicAndExactOnZerosAndNonFloats) {
  at::Tensor x = Activation();
  EXPECT_TRUE(at::equal(*RoundTrip(x, WireDtype::kFp8), *RoundTrip(x, WireDtype::kFp8)));
  at::Tensor zeros = at::zeros({2, 5, 8});
  EXPECT_TRUE(at::equal(*RoundTrip(zeros, WireDtype::kFp8), zeros));
  at::Tensor ids = at::arange(12, at::kLong).reshape({3, 4});
  uint64_t bytes = 0;
  EXPECT_TRUE(at::equal(*RoundTrip(ids, WireDtype::kFp8, &bytes), ids));
  EXPECT_EQ(bytes, 12u * 8);
  at::Tensor bf = x.to(at::kBFloat16);  // already as narrow as bf16: sent as is
  EXPECT_TRUE(at::equal(*RoundTrip(bf, WireDtype::kBf16, &bytes), bf));
  EXPECT_EQ(bytes, static_cast<uint64_t>(x.numel()) * 2);
}

// A fuzz finding: an fp64 row beyond fp32's range had an inf scale the receiver refused. Rows fp8 cannot scale
// (that, inf, NaN) now travel exactly, and the receiver takes them.
TEST(WireCompression, Fp8SendsWhatItCannotScaleExactly) {
  at::Tensor big = at::tensor({1e300, -2.0, 0.5, 3.0}, at::kDouble).reshape({2, 2});
  at::Tensor nonfinite = at::tensor({std::numeric_limits<float>::infinity(), 1.0f, 2.0f, NAN}).reshape({2, 2});
  for (const at::Tensor& t : {big, nonfinite}) {
    EXPECT_FALSE(CompressForWire(t, WireDtype::kFp8).row_scales.defined()) << t;
    absl::StatusOr<at::Tensor> back = RoundTrip(t, WireDtype::kFp8);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_TRUE(at::equal(back->isnan(), t.isnan()));
    EXPECT_TRUE(at::equal(at::nan_to_num(*back), at::nan_to_num(t))) << *back;
  }
}

TEST(WireCompression, TheReceiverCapsTheDecodedSize) {
  at::Tensor x = at::ones({4, 256});  // 1 KiB fp8 on the wire, 4 KiB once decoded
  absl::StatusOr<at::Tensor> y = RoundTrip(x, WireDtype::kFp8, nullptr, /*cap=*/2048);
  ASSERT_FALSE(y.ok());
  EXPECT_THAT(std::string(y.status().message()), HasSubstr("4096 bytes; the limit is 2048"));
}

v1::TensorHeader Fp8Header(int rows) {
  v1::TensorHeader h;
  h.set_dtype(v1::DTYPE_F8_E4M3);
  h.set_decode_dtype(v1::DTYPE_F32);
  for (int i = 0; i < rows; ++i) h.add_row_scales(1.0f);
  return h;
}

TEST(WireCompression, MalformedCompressionFieldsAreRejected) {
  at::Tensor payload = at::ones({3, 4}).to(at::kFloat8_e4m3fn);
  auto message = [](const absl::StatusOr<at::Tensor>& r) { return std::string(r.status().message()); };
  EXPECT_THAT(message(DecompressFromWire(Fp8Header(2), payload)), HasSubstr("3 rows but 2 row_scales"));
  v1::TensorHeader negative = Fp8Header(3);
  negative.set_row_scales(1, -2.0f);
  EXPECT_THAT(message(DecompressFromWire(negative, payload)), HasSubstr("is not >= 0"));
  v1::TensorHeader to_int = Fp8Header(3);
  to_int.set_decode_dtype(v1::DTYPE_I32);
  EXPECT_THAT(message(DecompressFromWire(to_int, payload)), HasSubstr("floating tensors only"));
  v1::TensorHeader scales_on_bf16 = Fp8Header(3);
  scales_on_bf16.set_dtype(v1::DTYPE_BF16);
  EXPECT_THAT(message(DecompressFromWire(scales_on_bf16, at::ones({3, 4}, at::kBFloat16))),
              HasSubstr("only valid with an fp8 payload"));
  v1::TensorHeader stray;
  stray.add_row_scales(1.0f);
  EXPECT_THAT(message(DecompressFromWire(stray, at::ones({1, 4}))), HasSubstr("row_scales without decode_dtype"));
}

TEST(WireCompression, ParsesItsThreeNames) {
  EXPECT_EQ(*ParseWireDtype("fp8"), WireDtype::kFp8);
  EXPECT_EQ(*ParseWireDtype("bf16"), WireDtype::kBf16);
  EXPECT_EQ(*ParseWireDtype("none"), WireDtype::kNone);
  EXPECT_THAT(std::string(ParseWireDtype("fp16").status().message()), HasSubstr("none, bf16, fp8"));
}

}  // namespace
}  // namespace baton
