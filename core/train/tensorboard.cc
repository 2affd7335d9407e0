#include "core/train/tensorboard.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/data/crc32c.h"
#include "core/util/files.h"
#include "core/util/status.h"

namespace baton {
namespace {

// Protocol-buffer wire format, the few shapes the messages need.
void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void PutFixed(std::string& out, const void* bytes, size_t n) {  // little-endian hosts (x86-64, arm64)
  out.append(static_cast<const char*>(bytes), n);
}

void PutBytesField(std::string& out, int field, const std::string& bytes) {
  PutVarint(out, static_cast<uint64_t>(field) << 3 | 2);
  PutVarint(out, bytes.size());
  out += bytes;
}

void PutVarintField(std::string& out, int field, uint64_t v) {
  PutVarint(out, static_cast<uint64_t>(field) << 3);
  PutVarint(out, v);
}

// summary.proto's Summary with one Value{tag = 1, <value>} (the value already encoded as its field).
std::string OneValueSummary(const std::string& tag, const std::string& value_field) {
  std::string value;
  PutBytesField(value, 1, tag);
  value += value_field;
  std::string summary;
  PutBytesField(summary, 1, value);  // Summary.value = 1
  return summary;
}

// TFRecord's masked CRC32C.
uint32_t MaskedCrc(const std::string& bytes) {
  const uint32_t crc = Crc32c(0, bytes.data(), bytes.size());
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

double WallTime() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

}  // namespace

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Open(const std::string& dir) {
  RETURN_IF_ERROR(MakeDirs(dir));
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "localhost");
  const std::string path = JoinPath(
      dir, absl::StrFormat("events.out.tfevents.%010d.%s.%d", static_cast<int64_t>(WallTime()), host, getpid()));
  std::FILE* file = std::fopen(path.c_str(), "ab");
  if (!file) return absl::InternalError(absl::StrCat("cannot create ", path));
  std::unique_ptr<TensorBoardWriter> writer(new TensorBoardWriter(file, path));
  std::string version;
  PutBytesField(version, 3, "brain.Event:2");  // Event.file_version
  RETURN_IF_ERROR(writer->WriteEvent(0, version));
  return writer;
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

absl::Status TensorBoardWriter::WriteEvent(int64_t step, const std::string& what) {
  std::string event;
  const double wall = WallTime();
  PutVarint(event, 1 << 3 | 1);  // Event.wall_time, a double
  PutFixed(event, &wall, 8);
  PutVarintField(event, 2, static_cast<uint64_t>(step));  // Event.step
  event += what;
  std::string record;
  const uint64_t length = event.size();
  std::string length_bytes;
  PutFixed(length_bytes, &length, 8);
  const uint32_t length_crc = MaskedCrc(length_bytes), data_crc = MaskedCrc(event);
  record += length_bytes;
  PutFixed(record, &length_crc, 4);
  record += event;
  PutFixed(record, &data_crc, 4);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0) {
    return absl::InternalError(absl::StrCat("cannot write ", path_));
  }
  return absl::OkStatus();
}

absl::Status TensorBoardWriter::Scalar(const std::string& tag, int64_t step, double value) {
  std::string field;
  PutVarint(field, 2 << 3 | 5);  // Value.simple_value, a float
  const float v = static_cast<float>(value);
  PutFixed(field, &v, 4);
  std::string what;
  PutBytesField(what, 5, OneValueSummary(tag, field));  // Event.summary
  return WriteEvent(step, what);
}

absl::Status TensorBoardWriter::PngImage(const std::string& tag, int64_t step, const std::string& png_path) {
  ASSIGN_OR_RETURN(std::string png, ReadFile(png_path));
  // The IHDR chunk: the 8-byte signature, its length and type, then width and height (big-endian).
  if (png.size() < 24 || png.compare(1, 3, "PNG") != 0 || png.compare(12, 4, "IHDR") != 0) {
    return absl::InvalidArgumentError(absl::StrCat(png_path, " is not a PNG file"));
  }
  auto be32 = [&](size_t at) {
    uint32_t v = 0;
    for (size_t i = 0; i < 4; ++i) v = v << 8 | static_cast<uint8_t>(png[at + i]);
    return v;
  };
  std::string image;
  PutVarintField(image, 1, be32(20));  // Image.height
  PutVarintField(image, 2, be32(16));  // Image.width
  PutVarintField(image, 3, 3);         // Image.colorspace: RGB
  PutBytesField(image, 4, png);        // Image.encoded_image_string
  std::string field;
  PutBytesField(field, 4, image);  // Value.image
  std::string what;
  PutBytesField(what, 5, OneValueSummary(tag, field));
  return WriteEvent(step, what);
}

absl::Status TensorBoardWriter::Record(const nlohmann::ordered_json& line) {
  if (!line.is_object() || !line.contains("step") || !line["step"].is_number_integer()) return absl::OkStatus();
  const int64_t step = line["step"].get<int64_t>();
  const std::string event = line.value("event", std::string());
  if (event.empty() && line.contains("loss")) {
    for (const char* key : {"loss", "lr", "grad_norm", "samples_per_second", "step_seconds"}) {
      if (line.contains(key) && line[key].is_number()) {
        RETURN_IF_ERROR(Scalar(absl::StrCat("train/", key), step, line[key].get<double>()));
      }
    }
  }
  // The adapters' EMA's evaluations (ema.evals) under tags of their own: validation_ema/..., samples_ema/...
  const std::string of = line.value("weights", std::string()) == "ema" ? "_ema" : "";
  if (event == "validation" && line.contains("validation_loss")) {
    for (const auto& [t, loss] : line["validation_loss"].items()) {
      if (!loss.is_number()) continue;
      const std::string tag = absl::StrCat("validation", of, t == "mean" ? "/loss_mean" : absl::StrCat("/loss_t=", t));
      RETURN_IF_ERROR(Scalar(tag, step, loss.get<double>()));
    }
  } else if (event == "samples" && line.contains("dir") && line["dir"].is_string()) {
    std::vector<std::filesystem::path> pngs;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(line["dir"].get<std::string>(), ec)) {
      if (entry.path().extension() == ".png") pngs.push_back(entry.path());
    }
    std::sort(pngs.begin(), pngs.end());
    for (const auto& png : pngs) {
      RETURN_IF_ERROR(PngImage(absl::StrCat("samples", of, "/", png.stem().string()), step, png.string()));
    }
  }
  return absl::OkStatus();
}

}  // namespace baton
