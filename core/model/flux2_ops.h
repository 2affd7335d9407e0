// Stateless FLUX.2 building blocks with exactly the semantics of diffusers' transformer_flux2.py:
// sinusoidal timestep features, 4-axis RoPE (theta 2000, interleaved pairs), RoPE application, per-head
// RMSNorm, non-affine LayerNorm, SwiGLU and plain softmax attention. Shapes use B = batch, S = sequence,
// H = heads, Dh = head dim, D = H·Dh.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace baton {

// diffusers Timesteps(num_channels, flip_sin_to_cos=True, downscale_freq_shift=0) of t (already ×1000).
// t: [B] → [B, channels] fp32, laid out [cos | sin].
at::Tensor TimestepFeatures(const at::Tensor& t, int64_t channels);

// RoPE tables for position ids [S, n_axes] (fp any): returns (cos, sin), each [S, sum(axes_dims)] fp32.
// Each axis i contributes axes_dims[i] columns, frequencies theta^(-2j/axes_dims[i]) computed in fp64,
// each value repeated twice (interleaved pairs), as diffusers' get_1d_rotary_pos_embed(repeat_interleave_real).
std::pair<at::Tensor, at::Tensor> RopeTables(const at::Tensor& ids, const std::vector<int64_t>& axes_dims,
                                             double theta);

// Rotates interleaved pairs: x [B, S, H, Dh], cos/sin [S, Dh] fp32. Computed in fp32, returned in x's dtype.
at::Tensor ApplyRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// RMSNorm over the last dim with a learned weight [Dh]; computed in fp32.
at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps);

// LayerNorm over the last dim without affine parameters.
at::Tensor LayerNormNoAffine(const at::Tensor& x, double eps);

// (1 + scale) · LayerNormNoAffine(x) + shift, diffusers' adaLN modulation. x [B, S, D], scale/shift [B, 1, D].
at::Tensor ModulatedLayerNorm(const at::Tensor& x, const at::Tensor& scale, const at::Tensor& shift, double eps);

// silu(first half) · second half along the last dim.
at::Tensor SwiGlu(const at::Tensor& x);

// Full bidirectional attention, scale 1/√Dh. q, k, v: [B, S, H, Dh] → [B, S, H·Dh].
// Uses scaled_dot_product_attention (flash / memory-efficient kernels) on libtorch ≥ 2.0.
at::Tensor Attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

// Splits a flat modulation tensor [B, n·D] into n chunks of [B, 1, D] (split inside the block: tuples of
// tensors passed across a checkpoint/stage boundary break recompute — diffusers #12776).
std::vector<at::Tensor> SplitModulation(const at::Tensor& mod, int64_t n);

// Image position ids for an h×w token grid: [h·w, 4] int64 rows (t=0, row, col, l=0).
at::Tensor ImagePositionIds(int64_t h, int64_t w);
// Text position ids: [L, 4] int64 rows (0, 0, 0, l).
at::Tensor TextPositionIds(int64_t length);

// Reference images' position ids as Flux2Pipeline._prepare_image_ids gives them (scale 10): reference k's h×w grid
// gets rows (10 + 10·k, row, col, 0), references one after the other: [Σ h·w, 4] int64. They follow the target's
// ImagePositionIds in the image stream.
at::Tensor ReferencePositionIds(const std::vector<std::pair<int64_t, int64_t>>& grids);
// How many leading image tokens are the target's (time coordinate 0) when `img_ids` [Si, 4] also holds reference
// tokens (time ≠ 0); 0 when it holds none (every token is the target's). Throws c10::Error when a reference token
// comes before a target token, or no token is the target's.
int64_t TargetTokens(const at::Tensor& img_ids);

}  // namespace baton
