#include "wire/envelope.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace baton {
namespace {

using ::testing::HasSubstr;

// In-memory stand-ins for grpc::ClientWriter / grpc::ServerReader of v1::Envelope.
struct VectorWriter {
  std::vector<v1::Envelope> messages;
  size_t fail_after = SIZE_MAX;  // Write returns false once this many messages were written
  bool Write(const v1::Envelope& m) {
    if (messages.size() >= fail_after) return false;
    messages.push_back(m);
    return true;
  }
};
struct VectorReader {
  std::vector<v1::Envelope> messages;
  size_t next = 0;
  bool Read(v1::Envelope* m) {
    if (next == messages.size()) return false;
    *m = messages[next++];
    return true;
  }
};

v1::EnvelopeHeader Header(v1::EnvelopeHeader::Kind kind) {
  v1::EnvelopeHeader h;
  h.set_job_id("job-1");
  h.set_step(12);
  h.set_micro_batch(2);
  h.set_kind(kind);
  h.set_sender("stage 0");
  return h;
}

VectorWriter Written(const std::map<std::string, at::Tensor>& tensors, size_t chunk = 32) {
  VectorWriter w;
  absl::Status s = WriteEnvelope(&w, Header(v1::EnvelopeHeader::CONSTANTS), tensors, chunk);
  EXPECT_TRUE(s.ok()) << s;
  return w;
}

absl::Status ReadStatus(std::vector<v1::Envelope> messages, const EnvelopeLimits& limits = {}) {
  VectorReader r{std::move(messages)};
  return ReadEnvelope(&r, limits).status();
}

TEST(EnvelopeTest, RoundTripsHeaderAndTensors) {
  at::manual_seed(3);
  std::map<std::string, at::Tensor> tensors = {
      {"modulation", at::randn({2, 45})}, {"txt", at::randn({2, 7, 8}).to(at::kBFloat16)}, {"none", at::empty({0, 4})}};
  VectorWriter w = Written(tensors);
  ASSERT_TRUE(w.messages[0].has_header());
  // Every message after the header is a chunk of at most 32 bytes.
  for (size_t i = 1; i < w.messages.size(); ++i) {
    ASSERT_TRUE(w.messages[i].has_chunk());
    EXPECT_LE(w.messages[i].chunk().data().size(), 32u);
  }
  VectorReader r{w.messages};
  absl::StatusOr<ReceivedEnvelope> got = ReadEnvelope(&r);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->header.job_id(), "job-1");
  EXPECT_EQ(got->header.step(), 12);
  EXPECT_EQ(got->header.micro_batch(), 2);
  EXPECT_EQ(got->header.kind(), v1::EnvelopeHeader::CONSTANTS);
  ASSERT_EQ(got->tensors.size(), 3u);
  EXPECT_EQ(got->bytes, 2u * 45 * 4 + 2 * 7 * 8 * 2);
  for (const auto& [name, t] : tensors) {
    const at::Tensor& back = got->tensors.at(name);
    EXPECT_EQ(back.scalar_type(), t.scalar_type()) << name;
    EXPECT_EQ(back.sizes(), t.sizes()) << name;
    // memcmp with an empty tensor's null data pointer is undefined (UBSan, scripts/sanitize.sh).
    if (t.numel() > 0) {
      EXPECT_EQ(std::memcmp(back.data_ptr(), t.data_ptr(), t.numel() * t.element_size()), 0) << name;
    }
  }
}

TEST(EnvelopeTest, WriterReportsBrokenStream) {
  VectorWriter w;
  w.fail_after = 0;
  EXPECT_EQ(WriteEnvelope(&w, Header(v1::EnvelopeHeader::INPUTS), {{"x", at::ones({4})}}).code(),
            absl::StatusCode::kUnavailable);
  w.fail_after = 2;
  absl::Status s = WriteEnvelope(&w, Header(v1::EnvelopeHeader::INPUTS), {{"x", at::ones({64})}}, 16);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'x'"));
}

TEST(EnvelopeTest, RejectsBadFraming) {
  // Two 32-byte tensors in 16-byte chunks.
  std::vector<v1::Envelope> good = Written({{"a", at::ones({8})}, {"b", at::ones({8})}}, 16).messages;

  absl::Status s = ReadStatus({});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("ended before its header"));

  std::vector<v1::Envelope> m = good;
  m.erase(m.begin());
  EXPECT_THAT(std::string(ReadStatus(m).message()), HasSubstr("first envelope message must be the header"));

  m = good;
  m[0].mutable_header()->set_kind(v1::EnvelopeHeader::KIND_UNSPECIFIED);
  EXPECT_THAT(std::string(ReadStatus(m).message()), HasSubstr("from 'stage 0' for step 12 has kind 0"));
  m[0].mutable_header()->set_kind(static_cast<v1::EnvelopeHeader::Kind>(42));
  EXPECT_THAT(std::string(ReadStatus(m).message()), HasSubstr("has kind 42"));

  m = good;
  m[0].mutable_header()->set_micro_batch(-1);
  EXPECT_THAT(std::string(ReadStatus(m).message()), HasSubstr("has step 12 and micro-batch -1"));

  m = good;
  m.insert(m.begin() + 2, good[0]);
  s = ReadStatus(m);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("CONSTANTS envelope for step 12 micro-batch 2: second header"));

  m = good;
  m.pop_back();
  EXPECT_THAT(std::string(ReadStatus(m).message()), HasSubstr("stream ended inside tensor 'b' after 16 of 32 bytes"));

  // The same tensor twice.
  m = good;
  std::vector<v1::Envelope> a_again = Written({{"a", at::ones({8})}}).messages;
  m.insert(m.end(), a_again.begin() + 1, a_again.end());
  EXPECT_THAT(std::string(ReadStatus(m).message()), HasSubstr("tensor 'a' sent twice"));
}

TEST(EnvelopeTest, EnforcesByteBudgets) {
  std::vector<v1::Envelope> m = Written({{"a", at::ones({8})}, {"b", at::ones({8})}}).messages;  // 32 B each
  EXPECT_TRUE(ReadStatus(m, {/*max_tensor_bytes=*/32, /*max_total_bytes=*/64}).ok());
  EXPECT_THAT(std::string(ReadStatus(m, {31, 64}).message()), HasSubstr("tensor 'a' is 32 bytes; the limit is 31"));
  EXPECT_THAT(std::string(ReadStatus(m, {32, 63}).message()), HasSubstr("would take it over 63 bytes"));
  EXPECT_EQ(ReadStatus(m, {32, 63}).code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace baton
