#include "tests/fuzz/fuzz_util.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/stubs/logging.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

namespace baton::fuzz {
namespace {

// Malformed messages are the point here; protobuf's log line for each (invalid UTF-8, ...) is noise.
const bool kQuietProtobuf = [] {
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int, const std::string&) {});
  return true;
}();

}  // namespace

std::vector<std::string> SplitDelimited(const uint8_t* data, size_t size, size_t max_messages) {
  std::vector<std::string> out;
  google::protobuf::io::CodedInputStream in(data, static_cast<int>(size));
  uint32_t length = 0;
  while (out.size() < max_messages && in.ReadVarint32(&length)) {
    std::string message;
    if (!in.ReadString(&message, static_cast<int>(length))) break;
    out.push_back(std::move(message));
  }
  return out;
}

std::string JoinDelimited(const std::vector<const google::protobuf::MessageLite*>& messages) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    for (const auto* m : messages) {
      coded.WriteVarint32(static_cast<uint32_t>(m->ByteSizeLong()));
      m->SerializeWithCachedSizes(&coded);
    }
  }
  return out;
}

std::string ScratchFile(const uint8_t* data, size_t size) {
  static const std::string path = [] {
    const char* tmp = std::getenv("TMPDIR");
    return std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/baton_fuzz_" + std::to_string(getpid()) +
           ".safetensors";
  }();
  static const bool cleanup = [] { return std::atexit([] { std::remove(path.c_str()); }) == 0; }();
  (void)cleanup;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  Require(out.good(), "writing the scratch file");
  return path;
}

void RequireOk(const absl::Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "fuzz invariant violated: %s: %s\n", what, status.ToString().c_str());
  std::abort();
}

void Require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz invariant violated: %s\n", what);
  std::abort();
}

}  // namespace baton::fuzz
