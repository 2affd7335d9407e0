// The optimizer's settings through JoinGroup (wire/optimizer_settings.h): every field of the job's optimizer reaches
// the stage as the coordinator has it, whatever the type.
#include "wire/optimizer_settings.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

// Every field away from its default.
OptimizerConfig Unusual() {
  OptimizerConfig o;
  o.type = "prodigy";
  o.beta1 = 0.8;
  o.beta2 = 0.95;
  o.eps = 1e-7;
  o.weight_decay = 0.01;
  o.plus_ratio = 16;
  o.min_8bit_size = 64;
  o.ema = {0.99, 0.5, 3, true, 2.0, 0.75, EmaConfig::Evals::kBoth};
  o.adafactor = {1e-29, 2e-3, 0.5, -0.7, 0.9, false, false, true};
  o.prodigy = {0.97, 1e-4, 0.8, 1.5, true, true, false};
  return o;
}

// Unusual() with every flag the other way: a flag the codec dropped reads as false (the proto's) or as its default in
// one of the two.
OptimizerConfig Flipped() {
  OptimizerConfig o = Unusual();
  o.ema.use_ema_warmup = !o.ema.use_ema_warmup;
  for (bool* flag : {&o.adafactor.relative_step, &o.adafactor.scale_parameter, &o.adafactor.warmup_init,
                     &o.prodigy.use_bias_correction, &o.prodigy.safeguard_warmup, &o.prodigy.decouple}) {
    *flag = !*flag;
  }
  return o;
}

void ExpectRoundTrip(const OptimizerConfig& a) {
  const OptimizerConfig b = OptimizerConfigOf(OptimizerSettingsOf(a));
  EXPECT_EQ(b.type, a.type);
  EXPECT_EQ(b.beta1, a.beta1);
  EXPECT_EQ(b.beta2, a.beta2);
  EXPECT_EQ(b.eps, a.eps);
  EXPECT_EQ(b.weight_decay, a.weight_decay);
  EXPECT_EQ(b.plus_ratio, a.plus_ratio);
  EXPECT_EQ(b.min_8bit_size, a.min_8bit_size);
  EXPECT_EQ(b.ema.decay, a.ema.decay);
  EXPECT_EQ(b.ema.min_decay, a.ema.min_decay);
  EXPECT_EQ(b.ema.update_after_step, a.ema.update_after_step);
  EXPECT_EQ(b.ema.use_ema_warmup, a.ema.use_ema_warmup);
  EXPECT_EQ(b.ema.inv_gamma, a.ema.inv_gamma);
  EXPECT_EQ(b.ema.power, a.ema.power);
  const AdafactorConfig &x = a.adafactor, &y = b.adafactor;
  EXPECT_EQ(y.eps1, x.eps1);
  EXPECT_EQ(y.eps2, x.eps2);
  EXPECT_EQ(y.clip_threshold, x.clip_threshold);
  EXPECT_EQ(y.decay_rate, x.decay_rate);
  EXPECT_EQ(y.beta1, x.beta1);
  EXPECT_EQ(y.relative_step, x.relative_step);
  EXPECT_EQ(y.scale_parameter, x.scale_parameter);
  EXPECT_EQ(y.warmup_init, x.warmup_init);
  const ProdigyConfig &p = a.prodigy, &q = b.prodigy;
  EXPECT_EQ(q.beta3, p.beta3);
  EXPECT_EQ(q.d0, p.d0);
  EXPECT_EQ(q.d_coef, p.d_coef);
  EXPECT_EQ(q.growth_rate, p.growth_rate);
  EXPECT_EQ(q.use_bias_correction, p.use_bias_correction);
  EXPECT_EQ(q.safeguard_warmup, p.safeguard_warmup);
  EXPECT_EQ(q.decouple, p.decouple);
  // And nothing the proto holds is left out of the config: the round trip is the same message.
  EXPECT_EQ(OptimizerSettingsOf(b).SerializeAsString(), OptimizerSettingsOf(a).SerializeAsString());
}

TEST(OptimizerSettingsTest, EveryFieldReachesTheStage) {
  ExpectRoundTrip(Unusual());
  ExpectRoundTrip(Flipped());
}

TEST(OptimizerSettingsTest, AnEmptyMessageIsPlainAdamW) {
  const OptimizerConfig c = OptimizerConfigOf(v1::OptimizerSettings());
  EXPECT_EQ(c.type, "adamw");
  EXPECT_EQ(c.plus_ratio, 1.0);
  EXPECT_FALSE(c.ema.enabled());
}

}  // namespace
}  // namespace baton
