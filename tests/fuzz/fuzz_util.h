// Helpers shared by the fuzz targets (tests/fuzz/*_fuzz.cc), the corpus writer and the replay test.
#pragma once

#include <absl/status/status.h>
#include <google/protobuf/message_lite.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace baton::fuzz {

// Splits `data` into length-delimited protobuf messages (varint length, then bytes: protobuf's
// writeDelimitedTo framing), at most `max_messages`; a truncated tail is dropped. Stream-shaped inputs (a
// Push stream, a chunk stream) are fuzzed in this framing so every message stays a real message.
std::vector<std::string> SplitDelimited(const uint8_t* data, size_t size, size_t max_messages = 4096);
// The inverse, for seeds.
std::string JoinDelimited(const std::vector<const google::protobuf::MessageLite*>& messages);

// Writes `data` to this process's scratch file (the same path on every call) and returns its path: the
// safetensors and LoRA readers take paths, not buffers.
std::string ScratchFile(const uint8_t* data, size_t size);

// An invariant the code under test promises; a violation aborts (libFuzzer reports it as a crash).
void Require(bool ok, const char* what);
// The same for a status that must be OK; the report carries the status.
void RequireOk(const absl::Status& status, const char* what);

}  // namespace baton::fuzz
