#include "core/model/stage_io.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "core/tensor/shape.h"

namespace baton {
namespace {

constexpr const char* kRopeKeyPrefix = kTablesKeyPrefix;

absl::StatusOr<at::Tensor> Get(const TensorMap& t, const std::string& name, int64_t dim, const std::string& what) {
  auto it = t.find(name);
  if (it == t.end()) return absl::InvalidArgumentError(absl::StrCat(what, ": tensor '", name, "' is missing"));
  if (it->second.dim() != dim) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": '", name, "' has shape ", ShapeString(it->second.sizes()),
                                                   ", expected ", dim, " dimensions"));
  }
  return it->second;
}

absl::Status CheckLast(const at::Tensor& t, const std::string& name, int64_t size, const std::string& what) {
  if (t.size(-1) != size) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": '", name, "' has shape ", ShapeString(t.sizes()), ", last dimension must be ", size));
  }
  return absl::OkStatus();
}

}  // namespace

std::string RopeKey(int64_t grid_h, int64_t grid_w, int64_t text_len) {
  return absl::StrCat("h", grid_h, "w", grid_w, "t", text_len);
}

TensorMap ConstantsOnWire(const ShellOutputs& shell) {
  TensorMap t = shell.constants;
  t[kTablesKeyPrefix + shell.tables_key] = at::empty({0});
  return t;
}

TensorMap TablesOnWire(const ShellOutputs& shell) {
  TensorMap t;
  for (const auto& [name, table] : shell.tables) t[absl::StrCat(name, "/", shell.tables_key)] = table;
  return t;
}

TensorMap ActivationTensors(const Flux2Activations& a) {
  if (a.joint.defined()) return {{"joint", a.joint}, {"txt_len", at::scalar_tensor(a.txt_len, at::kLong)}};
  return {{"img", a.img}, {"txt", a.txt}};
}

absl::StatusOr<Flux2Activations> ActivationsFromTensors(const TensorMap& t, const Flux2Config& c,
                                                        at::ScalarType dtype) {
  const std::string what = "activation";
  Flux2Activations a;
  const int64_t d = c.inner_dim();
  if (t.count("joint")) {
    if (t.size() != 2 || !t.count("txt_len")) {
      return absl::InvalidArgumentError("activation: 'joint' must come with 'txt_len' and nothing else");
    }
    auto joint = Get(t, "joint", 3, what);
    if (!joint.ok()) return joint.status();
    if (absl::Status s = CheckLast(*joint, "joint", d, what); !s.ok()) return s;
    const at::Tensor& len = t.at("txt_len");
    if (len.numel() != 1 || len.scalar_type() != at::kLong) {
      return absl::InvalidArgumentError("activation: 'txt_len' must be one int64");
    }
    a.joint = *joint;
    a.txt_len = len.item<int64_t>();
    if (a.txt_len < 0 || a.txt_len > a.joint.size(1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("activation: txt_len ", a.txt_len, " outside the sequence of ", a.joint.size(1)));
    }
  } else {
    if (t.size() != 2) return absl::InvalidArgumentError("activation: expected exactly 'img' and 'txt' (or 'joint')");
    auto img = Get(t, "img", 3, what);
    if (!img.ok()) return img.status();
    auto txt = Get(t, "txt", 3, what);
    if (!txt.ok()) return txt.status();
    if (absl::Status s = CheckLast(*img, "img", d, what); !s.ok()) return s;
    if (absl::Status s = CheckLast(*txt, "txt", d, what); !s.ok()) return s;
    if (img->size(0) != txt->size(0)) return absl::InvalidArgumentError("activation: img and txt batch sizes differ");
    a.img = *img;
    a.txt = *txt;
    a.txt_len = txt->size(1);
  }
  for (const at::Tensor& x : a.Live()) {
    if (x.scalar_type() != dtype) {
      return absl::InvalidArgumentError(absl::StrCat("activation: dtype ", c10::toString(x.scalar_type()),
                                                     " but this stage computes in ", c10::toString(dtype)));
    }
  }
  return a;
}

TensorMap InputGradientTensors(const Flux2Activations& input) {
  TensorMap out;
  auto grad = [](const at::Tensor& x) { return x.grad().defined() ? x.grad() : at::zeros_like(x); };
  if (input.joint.defined()) {
    out["joint"] = grad(input.joint);
  } else {
    out["img"] = grad(input.img);
    out["txt"] = grad(input.txt);
  }
  return out;
}

TensorMap ConstantTensors(const Flux2Constants& k, const std::string& rope_key) {
  TensorMap t{{"mod_img", k.mod_img},
              {"mod_txt", k.mod_txt},
              {"mod_single", k.mod_single},
              {"mod_out", k.mod_out},
              {kRopeKeyPrefix + rope_key, at::empty({0})}};
  if (k.target_tokens > 0) t["target_tokens"] = at::scalar_tensor(k.target_tokens, at::kLong);
  return t;
}

TensorMap RopeTensors(const Flux2Constants& k, const std::string& rope_key) {
  return {{"rope_cos/" + rope_key, k.rope_cos}, {"rope_sin/" + rope_key, k.rope_sin}};
}

absl::StatusOr<std::pair<Flux2Constants, std::string>> ConstantsFromTensors(const TensorMap& t, const Flux2Config& c) {
  const std::string what = "constants";
  const int64_t d = c.inner_dim();
  Flux2Constants k;
  std::string key;
  struct Field {
    const char* name;
    at::Tensor* dst;
    int64_t width;
  };
  for (const Field& f : {Field{"mod_img", &k.mod_img, 6 * d}, Field{"mod_txt", &k.mod_txt, 6 * d},
                         Field{"mod_single", &k.mod_single, 3 * d}, Field{"mod_out", &k.mod_out, 2 * d}}) {
    auto x = Get(t, f.name, 2, what);
    if (!x.ok()) return x.status();
    if (absl::Status s = CheckLast(*x, f.name, f.width, what); !s.ok()) return s;
    *f.dst = *x;
  }
  for (const auto& [name, tensor] : t) {
    if (absl::StartsWith(name, kRopeKeyPrefix)) key = name.substr(strlen(kRopeKeyPrefix));
  }
  if (key.empty()) return absl::InvalidArgumentError("constants: no rope_key/<key> entry");
  auto target = t.find("target_tokens");
  if (target != t.end()) {
    const at::Tensor& n = target->second;
    if (n.dim() != 0 || n.scalar_type() != at::kLong || n.item<int64_t>() <= 0) {
      return absl::InvalidArgumentError("constants: 'target_tokens' must be one positive int64");
    }
    k.target_tokens = n.item<int64_t>();
  }
  if (t.size() != (target == t.end() ? 5u : 6u))
    return absl::InvalidArgumentError("constants: unexpected extra tensors");
  return std::make_pair(k, key);
}

TensorMap InputTensors(const at::Tensor& hidden_states, const at::Tensor& encoder_hidden_states) {
  return {{"hidden_states", hidden_states}, {"encoder_hidden_states", encoder_hidden_states}};
}

absl::StatusOr<Flux2Activations> InputsFromTensors(const TensorMap& t, const Flux2Config& c, at::ScalarType dtype) {
  const std::string what = "inputs";
  auto hs = Get(t, "hidden_states", 3, what);
  if (!hs.ok()) return hs.status();
  auto ehs = Get(t, "encoder_hidden_states", 3, what);
  if (!ehs.ok()) return ehs.status();
  if (absl::Status s = CheckLast(*hs, "hidden_states", c.in_channels, what); !s.ok()) return s;
  if (absl::Status s = CheckLast(*ehs, "encoder_hidden_states", c.joint_attention_dim, what); !s.ok()) return s;
  if (hs->size(0) != ehs->size(0)) return absl::InvalidArgumentError("inputs: batch sizes differ");
  Flux2Activations a;
  a.img = hs->to(dtype);
  a.txt = ehs->to(dtype);
  a.txt_len = ehs->size(1);
  return a;
}

}  // namespace baton
