#include "wire/optimizer_settings.h"

namespace baton {

v1::OptimizerSettings OptimizerSettingsOf(const OptimizerConfig& o) {
  v1::OptimizerSettings s;
  s.set_beta1(o.beta1);
  s.set_beta2(o.beta2);
  s.set_eps(o.eps);
  s.set_weight_decay(o.weight_decay);
  s.set_plus_ratio(o.plus_ratio);
  s.set_ema_decay(o.ema.decay);
  s.set_ema_min_decay(o.ema.min_decay);
  s.set_ema_update_after_step(o.ema.update_after_step);
  s.set_ema_use_warmup(o.ema.use_ema_warmup);
  s.set_ema_inv_gamma(o.ema.inv_gamma);
  s.set_ema_power(o.ema.power);
  s.set_type(o.type);
  s.set_adafactor_eps1(o.adafactor.eps1);
  s.set_adafactor_eps2(o.adafactor.eps2);
  s.set_adafactor_clip_threshold(o.adafactor.clip_threshold);
  s.set_adafactor_decay_rate(o.adafactor.decay_rate);
  s.set_adafactor_beta1(o.adafactor.beta1);
  s.set_adafactor_relative_step(o.adafactor.relative_step);
  s.set_adafactor_scale_parameter(o.adafactor.scale_parameter);
  s.set_adafactor_warmup_init(o.adafactor.warmup_init);
  s.set_min_8bit_size(o.min_8bit_size);
  s.set_prodigy_beta3(o.prodigy.beta3);
  s.set_prodigy_d0(o.prodigy.d0);
  s.set_prodigy_d_coef(o.prodigy.d_coef);
  s.set_prodigy_growth_rate(o.prodigy.growth_rate);
  s.set_prodigy_use_bias_correction(o.prodigy.use_bias_correction);
  s.set_prodigy_safeguard_warmup(o.prodigy.safeguard_warmup);
  s.set_prodigy_decouple(o.prodigy.decouple);
  return s;
}

OptimizerConfig OptimizerConfigOf(const v1::OptimizerSettings& s) {
  OptimizerConfig config;
  config.beta1 = s.beta1();
  config.beta2 = s.beta2();
  config.eps = s.eps();
  config.weight_decay = s.weight_decay();
  config.plus_ratio = s.plus_ratio() == 0 ? 1.0 : s.plus_ratio();
  config.ema.decay = s.ema_decay();
  config.ema.min_decay = s.ema_min_decay();
  config.ema.update_after_step = s.ema_update_after_step();
  config.ema.use_ema_warmup = s.ema_use_warmup();
  config.ema.inv_gamma = s.ema_inv_gamma();
  config.ema.power = s.ema_power();
  config.type = s.type().empty() ? "adamw" : s.type();
  config.adafactor.eps1 = s.adafactor_eps1();
  config.adafactor.eps2 = s.adafactor_eps2();
  config.adafactor.clip_threshold = s.adafactor_clip_threshold();
  config.adafactor.decay_rate = s.adafactor_decay_rate();
  config.adafactor.beta1 = s.adafactor_beta1();
  config.adafactor.relative_step = s.adafactor_relative_step();
  config.adafactor.scale_parameter = s.adafactor_scale_parameter();
  config.adafactor.warmup_init = s.adafactor_warmup_init();
  config.min_8bit_size = s.min_8bit_size();
  config.prodigy.beta3 = s.prodigy_beta3();
  config.prodigy.d0 = s.prodigy_d0();
  config.prodigy.d_coef = s.prodigy_d_coef();
  config.prodigy.growth_rate = s.prodigy_growth_rate();
  config.prodigy.use_bias_correction = s.prodigy_use_bias_correction();
  config.prodigy.safeguard_warmup = s.prodigy_safeguard_warmup();
  config.prodigy.decouple = s.prodigy_decouple();
  return config;
}

v1::ProdigyScalars ProdigyScalarsProto(const ProdigyScalars& s) {
  v1::ProdigyScalars p;
  p.set_d(s.d);
  p.set_d_max(s.d_max);
  p.set_d_numerator(s.d_numerator);
  p.set_k(s.k);
  return p;
}

ProdigyScalars ProdigyScalarsOf(const v1::ProdigyScalars& p) { return {p.d(), p.d_max(), p.d_numerator(), p.k()}; }

}  // namespace baton
