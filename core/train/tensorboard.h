// TensorBoard event files beside train_log.jsonl (<output>/tensorboard/events.out.tfevents.<time>.<host>.<pid>): what
// the train log says, as TensorBoard's scalars and images. The records are TFRecord-framed `Event` messages
// (tensorflow/core/util/event.proto, summary.proto) written here field by field: six fields of three messages, which
// keeps core/ free of protobuf and of a TensorFlow dependency; the `tensorboard` package's own reader is the test
// (tests/upstream/test_tensorboard.py).
#pragma once

#include <absl/status/statusor.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace baton {

class TensorBoardWriter {
 public:
  // A new event file in `dir` (made when missing), starting with the file-version record.
  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> Open(const std::string& dir);
  ~TensorBoardWriter();

  absl::Status Scalar(const std::string& tag, int64_t step, double value);
  // A PNG file as an image summary (its size read from the PNG header).
  absl::Status PngImage(const std::string& tag, int64_t step, const std::string& png_path);
  // One train_log.jsonl line as TensorBoard shows it: a step's record (loss, lr, grad_norm, samples_per_second,
  // step_seconds) under train/, a validation pass's loss per timestep and mean under validation/, a sample pass's PNG
  // images under samples/. Other lines are not TensorBoard's.
  absl::Status Record(const nlohmann::ordered_json& line);

  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {}
  // One TFRecord: the event's bytes framed by their length and the masked CRC32Cs.
  absl::Status WriteEvent(int64_t step, const std::string& summary);

  std::FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace baton
