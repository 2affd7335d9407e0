#include "core/testing/tiny_flux2.h"

#include <ATen/CPUGeneratorImpl.h>
#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <unistd.h>

#include <cstdlib>

#include "core/model/flux2_ops.h"
#include "core/model/flux2_weights.h"
#include "core/util/files.h"

namespace baton::test_util {

Flux2Config TinyFlux2Config(bool guidance) {
  Flux2Config c;
  c.in_channels = 4;
  c.num_layers = 2;
  c.num_single_layers = 3;
  c.attention_head_dim = 8;
  c.num_attention_heads = 2;
  c.joint_attention_dim = 12;
  c.axes_dims_rope = {2, 2, 2, 2};
  c.guidance_embeds = guidance;
  return c;
}

TinyInputs MakeTinyInputs(const Flux2Config& c, int64_t batch, int64_t h, int64_t w, int64_t text_len, uint64_t seed,
                          at::ScalarType dtype) {
  auto gen = at::detail::createCPUGenerator(seed);
  TinyInputs in;
  in.hidden_states = at::randn({batch, h * w, c.in_channels}, gen).to(dtype);
  in.encoder_hidden_states = at::randn({batch, text_len, c.joint_attention_dim}, gen).to(dtype);
  in.timestep = at::rand({batch}, gen);
  in.guidance = at::full({batch}, 3.5);
  in.img_ids = ImagePositionIds(h, w);
  in.txt_ids = TextPositionIds(text_len);
  return in;
}

void LoadRandomWeights(torch::nn::Module& module, const Flux2Config& c, uint64_t seed) {
  auto weights = RandomFlux2StateDict(c, seed);
  at::NoGradGuard no_grad;
  for (auto& p : module.named_parameters()) {
    if (absl::StrContains(p.key(), "lora_")) continue;
    p.value().copy_(weights.at(p.key()));
  }
}

std::string MakeTempDir(const std::string& name) {
  static int counter = 0;
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/baton_", ::getpid(), "_", name, "_", counter++);
  (void)RemoveAll(dir);
  (void)MakeDirs(dir);
  return dir;
}

}  // namespace baton::test_util
