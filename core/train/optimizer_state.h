// The optimizer's state by name, shared by its rules (optimizer.cc, prodigy.cc): each per-parameter tensor is
// "<param><suffix>", and lives beside its parameter.
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <string>

namespace baton {

inline constexpr char kExpAvg[] = ".exp_avg";
inline constexpr char kExpAvgSq[] = ".exp_avg_sq";
inline constexpr char kExpAvgSqRow[] = ".exp_avg_sq_row";  // Adafactor's factored second moment of a matrix
inline constexpr char kExpAvgSqCol[] = ".exp_avg_sq_col";
inline constexpr char kEma[] = ".ema";
inline constexpr char kProdigyS[] = ".prodigy_s";    // Prodigy's accumulated weighted gradients
inline constexpr char kProdigyP0[] = ".prodigy_p0";  // and the parameters at its first step
// AdamW8bit's moments of a tensor of min_8bit_size elements or more: codes (uint8) and per-block scales (fp32).
inline constexpr char kExpAvgQ8[] = ".exp_avg_q8";
inline constexpr char kExpAvgAbsmax[] = ".exp_avg_absmax";
inline constexpr char kExpAvgSqQ8[] = ".exp_avg_sq_q8";
inline constexpr char kExpAvgSqAbsmax[] = ".exp_avg_sq_absmax";

// state[key], made by `make()` when missing, moved beside `like` when elsewhere (state loaded on the host: a
// checkpoint, LoadState).
template <typename Make>
at::Tensor& StateBeside(std::map<std::string, at::Tensor>& state, const std::string& key, const at::Tensor& like,
                        Make make) {
  at::Tensor& t = state[key];
  if (!t.defined()) {
    t = make();
  } else if (t.device() != like.device()) {
    t = t.to(like.device());
  }
  return t;
}

}  // namespace baton
