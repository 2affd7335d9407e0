// The fuzz targets' bodies, callable without libFuzzer: each returns whether the code under test accepted the
// input (the replay test checks that every seed is accepted, so the seeds reach past the first validation).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "baton/v1/stage.pb.h"

namespace baton::fuzz {

bool RunWire(const uint8_t* data, size_t size);
bool RunSafetensors(const uint8_t* data, size_t size);
bool RunJob(const uint8_t* data, size_t size);
bool RunLora(const uint8_t* data, size_t size);
bool RunStage(const uint8_t* data, size_t size);

// The stage target's worker: one stage holding the whole tiny FLUX.2 model (core/testing/tiny_flux2.h, random
// weights written once per process), job "job", rank-2 attention LoRA. The seed writer makes its step.
v1::ConfigureRequest StageFuzzConfigure();

// Writes real-shaped seeds for every target under `dir`/<target>/ (tests/fuzz/corpus is made this way).
void WriteSeedCorpus(const std::string& dir);

}  // namespace baton::fuzz
