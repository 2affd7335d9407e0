#include "core/testing/tiny_wan.h"

namespace baton::test_util {

WanConfig TinyWanConfig(int64_t layers) {
  WanConfig c;
  c.num_attention_heads = 2;
  c.attention_head_dim = 12;
  c.in_channels = 4;
  c.out_channels = 4;
  c.text_dim = 16;
  c.ffn_dim = 32;
  c.num_layers = layers;
  c.rope_max_seq_len = 32;
  return c;
}

}  // namespace baton::test_util
