#include "wire/wire.h"

#include <absl/strings/str_cat.h>
#include <absl/synchronization/mutex.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "baton/v1/stage.grpc.pb.h"
#include "rpc/grpc_options.h"
#include "rpc/grpc_status.h"
#include "wire/envelope.h"

namespace baton {
namespace {

using ::testing::HasSubstr;

bool SameBytes(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  at::Tensor ca = a.contiguous(), cb = b.contiguous();
  const size_t n = ca.numel() * ca.element_size();
  return n == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), n) == 0;
}

std::vector<v1::TensorChunk> Chunks(const std::string& name, const at::Tensor& t, size_t max_chunk) {
  std::vector<v1::TensorChunk> out;
  absl::Status s = AppendTensorChunks(name, t, max_chunk, [&](v1::TensorChunk&& c) {
    out.push_back(std::move(c));
    return true;
  });
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// Feeds all chunks; returns the completed tensors or the first error (including Finish's).
absl::StatusOr<std::vector<NamedTensor>> Assemble(std::vector<v1::TensorChunk> chunks,
                                                  uint64_t cap = uint64_t{1} << 30) {
  TensorAssembler assembler(cap);
  std::vector<NamedTensor> done;
  for (v1::TensorChunk& c : chunks) {
    absl::StatusOr<std::optional<NamedTensor>> r = assembler.Add(c);
    if (!r.ok()) return r.status();
    if (r->has_value()) done.push_back(std::move(**r));
  }
  absl::Status finished = assembler.Finish();
  if (!finished.ok()) return finished;
  return done;
}

TEST(WireTest, DTypeMappingRoundTrips) {
  for (at::ScalarType t : {at::kFloat, at::kBFloat16, at::kHalf, at::kDouble, at::kLong, at::kInt, at::kShort,
                           at::kChar, at::kByte, at::kBool, at::kFloat8_e4m3fn}) {
    absl::StatusOr<v1::DType> wire = TorchToWireDType(t);
    ASSERT_TRUE(wire.ok()) << c10::toString(t);
    absl::StatusOr<at::ScalarType> back = WireDTypeToTorch(*wire);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, t);
  }
  EXPECT_EQ(TorchToWireDType(at::kComplexFloat).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WireDTypeToTorch(v1::DTYPE_UNSPECIFIED).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WireDTypeToTorch(static_cast<v1::DType>(99)).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(WireTest, RoundTripsDtypesAndShapes) {
  at::manual_seed(1);
  struct Case {
    at::Tensor tensor;
    size_t chunk;
  };
  std::vector<Case> cases = {
      {at::randn({3, 5}), 7},                           // f32, chunk not aligned to elements
      {at::randn({2, 3, 4}).to(at::kBFloat16), 6},      // bf16
      {at::randn({17}).to(at::kHalf), kMaxChunkBytes},  // f16, one chunk
      {at::randn({4, 4}, at::kDouble), 8},              // f64
      {at::randint(-1000, 1000, {9}, at::kLong), 16},   // i64
      {at::randint(-5, 5, {2, 2}, at::kInt), 3},        // i32
      {at::randint(0, 255, {33}, at::kByte), 10},       // u8
      {at::randint(-100, 100, {5}, at::kChar), 2},      // i8
      {at::randint(0, 2, {11}).to(at::kBool), 4},       // bool
      {at::empty({0, 7}), 5},                           // empty, 2-D
      {at::empty({0}, at::kBFloat16), 5},               // empty bf16
      {at::scalar_tensor(3.5), 1},                      // 0-dim scalar
      {at::randn({6, 5}).t(), 13},                      // non-contiguous view
      {at::randn({3, 3}).requires_grad_(), 10},         // autograd leaf
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const at::Tensor& t = cases[i].tensor;
    const std::string name = absl::StrCat("t", i);  // not "t" + to_string: GCC 12 -O3 -Wrestrict false positive
    std::vector<v1::TensorChunk> chunks = Chunks(name, t, cases[i].chunk);
    const size_t bytes = t.numel() * t.element_size();
    const size_t expected_chunks = bytes == 0 ? 1 : (bytes + cases[i].chunk - 1) / cases[i].chunk;
    EXPECT_EQ(chunks.size(), expected_chunks) << name;
    absl::StatusOr<std::vector<NamedTensor>> got = Assemble(std::move(chunks));
    ASSERT_TRUE(got.ok()) << name << ": " << got.status();
    ASSERT_EQ(got->size(), 1u);
    EXPECT_EQ((*got)[0].name, name);
    EXPECT_TRUE(SameBytes((*got)[0].tensor, t)) << name;
    EXPECT_TRUE((*got)[0].tensor.is_contiguous());
  }
}

TEST(WireTest, ChunksAtExactAndInexactBoundaries) {
  const size_t chunk = 64;
  at::Tensor exact = at::arange(64, at::kFloat);  // 256 bytes = 4 chunks exactly
  std::vector<v1::TensorChunk> c = Chunks("exact", exact, chunk);
  ASSERT_EQ(c.size(), 4u);
  for (size_t i = 0; i < c.size(); ++i) {
    EXPECT_EQ(c[i].offset(), i * chunk);
    EXPECT_EQ(c[i].data().size(), chunk);
    EXPECT_EQ(c[i].last(), i == 3);
    EXPECT_EQ(c[i].has_header(), i == 0);
  }
  EXPECT_EQ(c[0].header().total_bytes(), 256u);
  EXPECT_EQ(c[0].header().dtype(), v1::DTYPE_F32);
  ASSERT_EQ(c[0].header().shape_size(), 1);
  EXPECT_EQ(c[0].header().shape(0), 64);

  at::Tensor inexact = at::arange(66, at::kFloat);  // 264 bytes = 4 full chunks + 8 bytes
  c = Chunks("inexact", inexact, chunk);
  ASSERT_EQ(c.size(), 5u);
  EXPECT_EQ(c[4].offset(), 256u);
  EXPECT_EQ(c[4].data().size(), 8u);
  EXPECT_TRUE(c[4].last());
  EXPECT_FALSE(c[3].last());

  // Both on one stream, one after the other.
  std::vector<v1::TensorChunk> stream = Chunks("exact", exact, chunk);
  for (v1::TensorChunk& x : c) stream.push_back(std::move(x));
  absl::StatusOr<std::vector<NamedTensor>> got = Assemble(std::move(stream));
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  EXPECT_TRUE(SameBytes((*got)[0].tensor, exact));
  EXPECT_TRUE(SameBytes((*got)[1].tensor, inexact));
  EXPECT_EQ((*got)[1].name, "inexact");
}

TEST(WireTest, BrokenStreamStopsEmission) {
  int calls = 0;
  absl::Status s = AppendTensorChunks("acts", at::zeros({100}), 40, [&](v1::TensorChunk&&) {
    ++calls;
    return calls < 2;
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'acts'"));
  EXPECT_EQ(calls, 2);
}

TEST(WireTest, SenderRejectsBadArguments) {
  auto ignore = [](v1::TensorChunk&&) { return true; };
  EXPECT_EQ(AppendTensorChunks("", at::zeros({1}), 8, ignore).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AppendTensorChunks("x", at::Tensor(), 8, ignore).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AppendTensorChunks("x", at::zeros({1}), 0, ignore).code(), absl::StatusCode::kInvalidArgument);
  absl::Status sparse = AppendTensorChunks("sp", at::eye(3).to_sparse(), 8, ignore);
  EXPECT_EQ(sparse.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(sparse.message()), HasSubstr("'sp' is not dense"));
  absl::Status complex = AppendTensorChunks("cplx", at::zeros({1}, at::kComplexFloat), 8, ignore);
  EXPECT_EQ(complex.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(complex.message()), HasSubstr("'cplx'"));
}

// Four 16-byte chunks of a [4, 4] f32 tensor named "mod"; each malformed case edits a copy.
std::vector<v1::TensorChunk> Good() { return Chunks("mod", at::arange(16, at::kFloat).view({4, 4}), 16); }

void ExpectRejected(std::vector<v1::TensorChunk> chunks, const std::string& needle, uint64_t cap = 1 << 20) {
  absl::StatusOr<std::vector<NamedTensor>> got = Assemble(std::move(chunks), cap);
  ASSERT_FALSE(got.ok()) << "accepted; expected an error containing: " << needle;
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
  EXPECT_THAT(std::string(got.status().message()), HasSubstr(needle));
}

TEST(WireTest, RejectsMalformedHeaders) {
  auto c = Good();
  c[0].clear_header();
  ExpectRejected(c, "chunk without a header after the start");

  c = Good();
  c[0].mutable_header()->clear_name();
  ExpectRejected(c, "name must be 1..");

  c = Good();
  c[0].mutable_header()->set_name(std::string(kMaxWireNameBytes + 1, 'n'));
  ExpectRejected(c, "name must be 1..");

  c = Good();
  c[0].mutable_header()->set_dtype(v1::DTYPE_UNSPECIFIED);
  ExpectRejected(c, "tensor 'mod': unsupported wire dtype 0");

  c = Good();
  c[0].mutable_header()->set_dtype(static_cast<v1::DType>(77));
  ExpectRejected(c, "tensor 'mod': unsupported wire dtype 77");

  c = Good();
  c[0].mutable_header()->set_shape(0, -4);
  c[0].mutable_header()->set_shape(1, -4);
  ExpectRejected(c, "tensor 'mod' has a negative dimension in shape [-4, -4]");

  c = Good();
  for (int i = 0; i < kMaxWireDims; ++i) c[0].mutable_header()->add_shape(1);
  ExpectRejected(c, "tensor 'mod' has 18 dims");

  c = Good();
  c[0].mutable_header()->set_total_bytes(60);
  ExpectRejected(c, "tensor 'mod': total_bytes 60 does not match shape [4, 4] x 4 bytes = 64");

  c = Good();
  c[0].mutable_header()->set_shape(0, int64_t{1} << 40);
  c[0].mutable_header()->set_shape(1, int64_t{1} << 40);
  ExpectRejected(c, "tensor 'mod': shape [1099511627776, 1099511627776] overflows");

  // Large but representable: refused by the cap before any allocation.
  c = Good();
  c[0].mutable_header()->set_shape(0, int64_t{1} << 20);
  c[0].mutable_header()->set_shape(1, int64_t{1} << 20);
  c[0].mutable_header()->set_total_bytes(uint64_t{4} << 40);
  ExpectRejected(c, "tensor 'mod' is 4398046511104 bytes; the limit is 1048576");
  ExpectRejected(Good(), "tensor 'mod' is 64 bytes; the limit is 63", /*cap=*/63);
}

TEST(WireTest, RejectsMalformedChunkSequences) {
  auto c = Good();
  *c[2].mutable_header() = c[0].header();
  ExpectRejected(c, "tensor 'mod': new header (for 'mod') after 32 of 64 bytes");

  c = Good();
  c.erase(c.begin() + 1);  // gap
  ExpectRejected(c, "tensor 'mod': chunk offset 32 but 16 bytes received so far");

  c = Good();
  c[1].set_offset(8);  // overlap
  ExpectRejected(c, "tensor 'mod': chunk offset 8 but 16 bytes received so far");

  c = Good();
  c[3].mutable_data()->append("xyzw");  // past the end
  ExpectRejected(c, "tensor 'mod': chunk of 20 bytes at offset 48 runs past total_bytes 64");

  c = Good();
  c[1].set_last(true);  // early end
  ExpectRejected(c, "tensor 'mod': marked last at byte 32 of 64");

  c = Good();
  c[3].set_last(false);  // never ends
  ExpectRejected(c, "tensor 'mod': all 64 bytes received but the chunk is not last");

  c = Good();
  c.pop_back();  // stream ends mid-tensor
  ExpectRejected(c, "stream ended inside tensor 'mod' after 48 of 64 bytes");

  c = Good();
  v1::TensorChunk extra = c[3];
  extra.set_offset(64);
  c.push_back(extra);  // chunk after last
  ExpectRejected(c, "chunk without a header after the last chunk of tensor 'mod'");

  c = Good();
  v1::TensorChunk empty;
  empty.set_offset(16);
  c.insert(c.begin() + 1, empty);
  ExpectRejected(c, "tensor 'mod': empty chunk at offset 16");

  auto bools = Chunks("mask", at::ones({8}, at::kBool), 8);
  (*bools[0].mutable_data())[3] = 2;
  ExpectRejected(bools, "tensor 'mask': bool byte value 2");
}

TEST(WireTest, ErrorsAreSticky) {
  TensorAssembler assembler(1 << 20);
  auto c = Good();
  c[1].set_offset(99);
  ASSERT_TRUE(assembler.Add(c[0]).ok());
  EXPECT_FALSE(assembler.Add(c[1]).ok());
  // A perfectly good new tensor is still refused, and Finish reports the original error.
  auto fresh = Good();
  absl::StatusOr<std::optional<NamedTensor>> again = assembler.Add(fresh[0]);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(assembler.Finish().message()), HasSubstr("chunk offset 99"));
}

// ---- Over a real gRPC channel -------------------------------------------------------------------

// Implements only StageService.Push: reads the envelope and stores it.
class PushOnlyService final : public v1::StageService::Service {
 public:
  grpc::Status Push(grpc::ServerContext*, grpc::ServerReader<v1::Envelope>* reader, v1::PushAck* ack) override {
    absl::StatusOr<ReceivedEnvelope> envelope = ReadEnvelope(reader);
    if (!envelope.ok()) return ToGrpcStatus(envelope.status());
    ack->set_num_tensors(envelope->tensors.size());
    ack->set_num_bytes(envelope->bytes);
    absl::MutexLock lock(&mu_);
    last_ = std::move(*envelope);
    return grpc::Status::OK;
  }
  ReceivedEnvelope TakeLast() {
    absl::MutexLock lock(&mu_);
    return std::move(last_);
  }

 private:
  absl::Mutex mu_;
  ReceivedEnvelope last_;
};

struct TestServer {
  PushOnlyService service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

std::unique_ptr<TestServer> StartServer(bool with_options) {
  auto s = std::make_unique<TestServer>();
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &s->port);
  if (with_options) ApplyServerOptions(builder);
  builder.RegisterService(&s->service);
  s->server = builder.BuildAndStart();
  return s;
}

// Pushes `tensors` as one envelope; returns the RPC status as an absl::Status.
absl::Status PushTensors(int port, const std::map<std::string, at::Tensor>& tensors, size_t chunk, v1::PushAck* ack) {
  std::shared_ptr<grpc::Channel> channel =
      MakeChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  std::unique_ptr<v1::StageService::Stub> stub = v1::StageService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(absl::Seconds(30)));
  std::unique_ptr<grpc::ClientWriter<v1::Envelope>> writer = stub->Push(&context, ack);
  v1::EnvelopeHeader header;
  header.set_job_id("job");
  header.set_step(3);
  header.set_micro_batch(1);
  header.set_kind(v1::EnvelopeHeader::ACTIVATION);
  header.set_sender("test");
  absl::Status written = WriteEnvelope(writer.get(), header, tensors, chunk);
  writer->WritesDone();
  absl::Status finished = FromGrpcStatus(writer->Finish(), "Push to test server");
  return finished.ok() ? written : finished;
}

TEST(WireGrpcTest, HundredMegabyteActivationCrossesBitIdentical) {
  std::unique_ptr<TestServer> server = StartServer(/*with_options=*/true);
  ASSERT_NE(server->port, 0);
  at::manual_seed(7);
  at::Tensor acts = at::randn({25, 1024, 1024});  // [25, 1024, 1024] f32 = 100 MiB
  at::Tensor ids = at::arange(12, at::kLong).view({3, 4});
  v1::PushAck ack;
  absl::Status s = PushTensors(server->port, {{"img", acts}, {"ids", ids}}, kMaxChunkBytes, &ack);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(ack.num_tensors(), 2u);
  EXPECT_EQ(ack.num_bytes(), (uint64_t{100} << 20) + 12 * 8);
  ReceivedEnvelope got = server->service.TakeLast();
  EXPECT_EQ(got.header.job_id(), "job");
  EXPECT_EQ(got.header.step(), 3);
  EXPECT_EQ(got.header.micro_batch(), 1);
  EXPECT_EQ(got.header.kind(), v1::EnvelopeHeader::ACTIVATION);
  ASSERT_EQ(got.tensors.count("img"), 1u);
  EXPECT_TRUE(SameBytes(got.tensors["img"], acts));
  EXPECT_TRUE(SameBytes(got.tensors["ids"], ids));
  server->server->Shutdown(DeadlineAfter(absl::Seconds(1)));
}

TEST(WireGrpcTest, SizeLimitsApplyOnBothEnds) {
  // 8 MiB chunks exceed gRPC's 4 MiB default receive limit: a server built without our options refuses
  // them, ours accepts them.
  at::Tensor t = at::randn({4, 1024, 1024});  // 16 MiB f32
  const size_t chunk = size_t{8} << 20;
  v1::PushAck ack;
  std::unique_ptr<TestServer> plain = StartServer(/*with_options=*/false);
  EXPECT_EQ(PushTensors(plain->port, {{"t", t}}, chunk, &ack).code(), absl::StatusCode::kResourceExhausted);
  plain->server->Shutdown(DeadlineAfter(absl::Seconds(1)));

  std::unique_ptr<TestServer> tuned = StartServer(/*with_options=*/true);
  absl::Status s = PushTensors(tuned->port, {{"t", t}}, chunk, &ack);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(SameBytes(tuned->service.TakeLast().tensors["t"], t));
  tuned->server->Shutdown(DeadlineAfter(absl::Seconds(1)));
}

TEST(WireGrpcTest, MalformedStreamIsInvalidArgumentAndServerKeepsServing) {
  std::unique_ptr<TestServer> server = StartServer(/*with_options=*/true);
  std::shared_ptr<grpc::Channel> channel =
      MakeChannel("127.0.0.1:" + std::to_string(server->port), grpc::InsecureChannelCredentials());
  std::unique_ptr<v1::StageService::Stub> stub = v1::StageService::NewStub(channel);
  {
    grpc::ClientContext context;
    context.set_deadline(DeadlineAfter(absl::Seconds(10)));
    v1::PushAck ack;
    auto writer = stub->Push(&context, &ack);
    v1::Envelope e;
    e.mutable_header()->set_kind(v1::EnvelopeHeader::GRADIENT);
    e.mutable_header()->set_step(5);
    writer->Write(e);
    std::vector<v1::TensorChunk> chunks = Good();
    chunks[0].mutable_header()->set_total_bytes(1);
    *e.mutable_chunk() = chunks[0];
    writer->Write(e);
    writer->WritesDone();
    absl::Status s = FromGrpcStatus(writer->Finish(), "stage 9 (test) Push");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("stage 9 (test) Push: GRADIENT envelope for step 5 micro-batch 0: tensor 'mod': "
                          "total_bytes 1 does not match"));
  }
  v1::PushAck ack;
  absl::Status s = PushTensors(server->port, {{"after", at::ones({3})}}, kMaxChunkBytes, &ack);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(ack.num_tensors(), 1u);
  server->server->Shutdown(DeadlineAfter(absl::Seconds(1)));
}

}  // namespace
}  // namespace baton
