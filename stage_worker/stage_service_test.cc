// The stage worker's door (issue 10, part 5): a real gRPC server with a configured one-stage job gets foreign,
// stale, malformed, poisoned and oversized requests and a bogus Configure; each is refused with the documented
// status code, and after each the worker still runs a real step of its job (finite loss, every gradient).
#include "stage_worker/stage_service.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/lora/lora.h"
#include "core/model/flux2_weights.h"
#include "core/model/stage_io.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/common.h"
#include "core/util/files.h"
#include "rpc/grpc_options.h"
#include "wire/envelope.h"

namespace baton {
namespace {

using Kind = v1::EnvelopeHeader;

class StageServiceGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = test_util::MakeTempDir("guard");
    model_ = JoinPath(root_, "model");
    config_ = test_util::TinyFlux2Config();
    ASSERT_TRUE(WriteRandomFlux2Weights(config_, model_, 2).ok());
    StageRunnerOptions opts;
    opts.address = "guard";
    opts.wait_timeout = absl::Seconds(2);
    opts.model_root = root_;
    opts.inbox_bytes = 256 << 10;  // a tiny step needs a few KiB
    tenants_ = std::make_unique<StageTenants>(opts);
    service_ = std::make_unique<StageServiceImpl>(tenants_.get());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_ && port > 0);
    stub_ =
        v1::StageService::NewStub(MakeChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
    grpc::Status configured = Configure(Request());
    ASSERT_TRUE(configured.ok()) << configured.error_message();
  }
  void TearDown() override { server_->Shutdown(std::chrono::system_clock::now()); }

  v1::ConfigureRequest Request() const {
    v1::ConfigureRequest req;
    req.set_job_id("job");
    req.set_config_hash("hash");
    req.set_num_stages(1);
    req.set_micro_batches(1);
    req.set_model_path(model_);
    req.set_block_begin(0);
    req.set_block_end(static_cast<int32_t>(config_.num_blocks()));
    req.set_has_embedders(true);
    req.set_has_head(true);
    req.mutable_lora()->set_rank(2);
    req.mutable_lora()->set_alpha(2);
    const std::vector<std::string> targets = ResolveLoraTargets("attention").value();
    for (const auto& t : targets) req.mutable_lora()->add_targets(t);
    return req;
  }
  grpc::Status Configure(const v1::ConfigureRequest& req) {
    grpc::ClientContext ctx;
    v1::ConfigureResponse resp;
    return stub_->Configure(&ctx, req, &resp);
  }
  static v1::EnvelopeHeader Header(Kind::Kind kind, int64_t step, int mb = 0) {
    v1::EnvelopeHeader h;
    h.set_job_id("job");
    h.set_config_hash("hash");
    h.set_step(step);
    h.set_micro_batch(mb);
    h.set_kind(kind);
    h.set_sender("test");
    return h;
  }
  grpc::Status Push(const v1::EnvelopeHeader& h, const TensorMap& tensors) {
    grpc::ClientContext ctx;
    v1::PushAck ack;
    auto writer = stub_->Push(&ctx, &ack);
    (void)WriteEnvelope(writer.get(), h, tensors);  // a refused push may break the stream early
    writer->WritesDone();
    return writer->Finish();
  }
  v1::StepPlan Plan(int64_t step) const {
    v1::StepPlan plan;
    plan.set_job_id("job");
    plan.set_config_hash("hash");
    plan.set_step(step);
    plan.set_micro_batches(1);
    plan.set_loss_scale(1.0f);
    plan.add_actions()->set_type(v1::Action::FORWARD);
    plan.add_actions()->set_type(v1::Action::BACKWARD);
    return plan;
  }
  // Runs `plan`; the summary's loss (or the status).
  absl::StatusOr<float> RunStep(const v1::StepPlan& plan, int* num_grads = nullptr) {
    grpc::ClientContext ctx;
    auto reader = stub_->RunStep(&ctx, plan);
    v1::StepReply reply;
    float loss = NAN;
    int grads = 0;
    while (reader->Read(&reply)) {
      if (reply.has_summary()) loss = reply.summary().losses(0);
      if (reply.has_grad_chunk() && reply.grad_chunk().has_header()) ++grads;
    }
    grpc::Status s = reader->Finish();
    if (!s.ok()) return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
    if (num_grads) *num_grads = grads;
    return loss;
  }
  // The real job's data for `step` (what the coordinator pushes), optionally with another target.
  std::map<Kind::Kind, TensorMap> StepData(const at::Tensor& target = {}) {
    auto in = test_util::MakeTinyInputs(config_, 1, 2, 3, 4, 8);
    auto ckpt = Flux2Checkpoint::Open(model_);
    auto shell = BuildFlux2Shell(**ckpt, at::kFloat, at::kCPU);
    Flux2Constants k;
    {
      at::NoGradGuard no_grad;
      k = (*shell)(in.timestep, in.guidance, in.img_ids, in.txt_ids, at::kFloat);
    }
    std::map<std::string, at::Tensor> lora;
    for (const auto& name : lora_names_) lora[name] = at::full(lora_shapes_.at(name), 0.01);
    return {{Kind::ROPE, RopeTensors(k, "key")},
            {Kind::LORA_WEIGHTS, lora},
            {Kind::CONSTANTS, ConstantTensors(k, "key")},
            {Kind::INPUTS, InputTensors(in.hidden_states, in.encoder_hidden_states)},
            {Kind::TARGET, {{"target", target.defined() ? target : at::randn({1, 6, config_.out_dim()})}}}};
  }
  // Pushes the real data for `step` and runs it: the worker still serves its job.
  void ExpectRealStep(int64_t step) {
    if (lora_names_.empty()) LearnLoraShapes();
    for (const auto& [kind, tensors] : StepData()) {
      grpc::Status pushed = Push(Header(kind, step), tensors);
      ASSERT_TRUE(pushed.ok()) << Kind::Kind_Name(kind) << ": " << pushed.error_message();
    }
    int grads = 0;
    auto loss = RunStep(Plan(step), &grads);
    ASSERT_TRUE(loss.ok()) << loss.status();
    EXPECT_TRUE(std::isfinite(*loss)) << *loss;
    EXPECT_EQ(grads, static_cast<int>(lora_names_.size()));
  }
  void LearnLoraShapes() {
    grpc::ClientContext ctx;
    v1::GetLoraRequest req;
    req.set_job_id("job");
    req.set_config_hash("hash");
    auto reader = stub_->GetLora(&ctx, req);
    v1::TensorChunk chunk;
    while (reader->Read(&chunk)) {
      if (!chunk.has_header()) continue;
      lora_names_.push_back(chunk.header().name());
      lora_shapes_[chunk.header().name()] = {chunk.header().shape().begin(), chunk.header().shape().end()};
    }
    ASSERT_TRUE(reader->Finish().ok());
  }
  static void ExpectCode(const grpc::Status& s, grpc::StatusCode code, const std::string& needle) {
    EXPECT_EQ(s.error_code(), code) << s.error_message();
    EXPECT_NE(s.error_message().find(needle), std::string::npos) << s.error_message();
    EXPECT_EQ(s.error_message().find("frame #"), std::string::npos) << s.error_message();
  }

  std::string root_, model_;
  Flux2Config config_;
  std::unique_ptr<StageTenants> tenants_;
  std::unique_ptr<StageServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::StageService::Stub> stub_;
  std::vector<std::string> lora_names_;
  std::map<std::string, std::vector<int64_t>> lora_shapes_;
};

TEST_F(StageServiceGuardTest, ForeignJobsAreRefusedOnEveryRpc) {
  ExpectRealStep(0);
  // NaN targets under another job id, or the right id with another config hash: refused, never stored.
  v1::EnvelopeHeader foreign = Header(Kind::TARGET, 1);
  foreign.set_job_id("stranger");
  const TensorMap nan_target = {{"target", at::full({1, 6, config_.out_dim()}, NAN)}};
  ExpectCode(Push(foreign, nan_target), grpc::StatusCode::FAILED_PRECONDITION,
             "is for job 'stranger' (config hash 'hash') but this worker runs job 'job' (config hash 'hash')");
  v1::EnvelopeHeader other_hash = Header(Kind::TARGET, 1);
  other_hash.set_config_hash("other");
  ExpectCode(Push(other_hash, nan_target), grpc::StatusCode::FAILED_PRECONDITION, "config hash 'other'");
  v1::StepPlan plan = Plan(1);
  plan.set_job_id("stranger");
  absl::Status refused_plan = RunStep(plan).status();
  EXPECT_EQ(refused_plan.code(), absl::StatusCode::kFailedPrecondition) << refused_plan;
  EXPECT_NE(refused_plan.message().find("step plan 1 is for job 'stranger'"), std::string::npos) << refused_plan;
  grpc::ClientContext ctx;
  v1::GetLoraRequest lora;
  lora.set_job_id("job");
  lora.set_config_hash("other");
  auto reader = stub_->GetLora(&ctx, lora);
  v1::TensorChunk chunk;
  EXPECT_FALSE(reader->Read(&chunk));  // the adapter is not handed out
  ExpectCode(reader->Finish(), grpc::StatusCode::FAILED_PRECONDITION, "GetLora is for job 'job'");
  ExpectRealStep(1);
}

TEST_F(StageServiceGuardTest, StepWindowAndRangesAreEnforced) {
  ExpectRealStep(0);
  ExpectRealStep(1);
  const TensorMap data = StepData()[Kind::CONSTANTS];
  ExpectCode(Push(Header(Kind::CONSTANTS, 0), data), grpc::StatusCode::OUT_OF_RANGE, "step 0 is outside [1, 3]");
  ExpectCode(Push(Header(Kind::CONSTANTS, 4), data), grpc::StatusCode::OUT_OF_RANGE, "step 4 is outside [1, 3]");
  // Malformed whatever the step: INVALID_ARGUMENT (stage.proto).
  ExpectCode(Push(Header(Kind::CONSTANTS, 2, /*mb=*/1), data), grpc::StatusCode::INVALID_ARGUMENT,
             "micro-batch 1 is outside [0, 1)");
  v1::EnvelopeHeader chunk = Header(Kind::CONSTANTS, 2);
  chunk.set_chunk(3);
  ExpectCode(Push(chunk, data), grpc::StatusCode::INVALID_ARGUMENT, "chunk 3 is outside [0, 1)");
  ExpectCode(Push(Header(Kind::CONSTANTS, -1), data), grpc::StatusCode::INVALID_ARGUMENT, "step -1");
  ExpectCode(Push(Header(Kind::ACTIVATION, 2), data), grpc::StatusCode::INVALID_ARGUMENT,
             "this stage receives no envelopes of kind 4");
  EXPECT_EQ(RunStep(Plan(9)).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(RunStep(Plan(0)).status().code(), absl::StatusCode::kOutOfRange);
  v1::StepPlan two = Plan(2);
  two.set_micro_batches(2);
  EXPECT_EQ(RunStep(two).status().code(), absl::StatusCode::kInvalidArgument);
  ExpectRealStep(2);
  ExpectRealStep(2);  // a redo of the current step (after a lost worker) is accepted
}

TEST_F(StageServiceGuardTest, PoisonAndWrongShapesNeverGetIn) {
  ExpectRealStep(0);
  ExpectCode(Push(Header(Kind::TARGET, 1), {{"target", at::full({1, 6, config_.out_dim()}, NAN)}}),
             grpc::StatusCode::INVALID_ARGUMENT, "tensor 'target' holds NaN or infinite values");
  at::Tensor inf = at::randn({1, 6, config_.out_dim()});
  inf[0][2][1] = INFINITY;
  ExpectCode(Push(Header(Kind::TARGET, 1), {{"target", inf}}), grpc::StatusCode::INVALID_ARGUMENT, "NaN or infinite");
  ExpectCode(Push(Header(Kind::TARGET, 1), {{"target", at::randn({1, 6, config_.out_dim() + 1})}}),
             grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("expected floating [b, Si, ", config_.out_dim(), "]"));
  TensorMap lora = StepData()[Kind::LORA_WEIGHTS];
  lora.begin()->second = at::zeros({3, 3});
  ExpectCode(Push(Header(Kind::LORA_WEIGHTS, 1), lora), grpc::StatusCode::INVALID_ARGUMENT, "expected [");
  // A target of the right rank and width but for another image size passes the door; the step then names it
  // before it reaches the loss (where it would broadcast silently).
  for (const auto& [kind, tensors] : StepData(at::randn({1, 5, config_.out_dim()}))) {
    ASSERT_TRUE(Push(Header(kind, 1), tensors).ok());
  }
  auto failed = RunStep(Plan(1));
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInvalidArgument);
  const int64_t c = config_.out_dim();
  EXPECT_NE(failed.status().message().find(
                absl::StrCat("TARGET of step 1 micro-batch 0 has shape [1, 5, ", c, "], expected [1, 6, ", c, "]")),
            std::string::npos)
      << failed.status();
  ExpectRealStep(1);
}

TEST_F(StageServiceGuardTest, TheInboxHasAByteBudget) {
  ExpectRealStep(0);
  // 512 KiB of inputs for a future step: over the 256 KiB budget, refused before it is allocated.
  TensorMap big = {{"hidden_states", at::zeros({1, 32768, config_.in_channels})},
                   {"encoder_hidden_states", at::zeros({1, 4, config_.joint_attention_dim})}};
  ExpectCode(Push(Header(Kind::INPUTS, 2), big), grpc::StatusCode::RESOURCE_EXHAUSTED, "would take it over");
  // Pushes that each fit, up to the budget: two 94 KiB inputs are held, a third bundle is refused.
  const TensorMap fits = {{"hidden_states", at::zeros({1, 6000, config_.in_channels})},
                          {"encoder_hidden_states", at::zeros({1, 4, config_.joint_attention_dim})}};
  ASSERT_TRUE(Push(Header(Kind::INPUTS, 1), fits).ok());
  ASSERT_TRUE(Push(Header(Kind::INPUTS, 2), fits).ok());
  ExpectCode(Push(Header(Kind::TARGET, 1), {{"target", at::zeros({1, 6000, config_.out_dim()})}}),
             grpc::StatusCode::RESOURCE_EXHAUSTED, "would take it over");
  ExpectRealStep(1);  // the worker keeps serving: step 1's real inputs replace the big ones
}

TEST_F(StageServiceGuardTest, BogusConfigureLeavesTheRunningJobAlone) {
  ExpectRealStep(0);
  auto refuse = [&](v1::ConfigureRequest req, grpc::StatusCode code, const std::string& needle) {
    const auto t0 = std::chrono::steady_clock::now();
    ExpectCode(Configure(req), code, needle);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0) << needle;
  };
  v1::ConfigureRequest req = Request();
  req.set_job_id("stranger");
  req.set_model_path("/dev/zero");
  refuse(req, grpc::StatusCode::PERMISSION_DENIED, "model path /dev/zero is outside the allowed root");
  req.set_model_path(model_);
  req.set_model_config_path("/dev/zero");
  refuse(req, grpc::StatusCode::PERMISSION_DENIED, "model config path /dev/zero is outside the allowed root");
  // A symlink inside the root that points out of it is no way around the root.
  const std::string link = JoinPath(root_, "escape");
  std::filesystem::create_symlink("/dev/zero", link);
  req.set_model_config_path(link);
  refuse(req, grpc::StatusCode::PERMISSION_DENIED, "(resolves to /dev/zero) is outside the allowed root");
  // Inside the root: not a regular file, or too big, fails at once with the limit named.
  const std::string fifo = JoinPath(root_, "fifo.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  req.set_model_config_path(fifo);
  refuse(req, grpc::StatusCode::INVALID_ARGUMENT, "fifo.json is not a regular file");
  const std::string big = JoinPath(root_, "big.json");
  std::ofstream(big) << std::string((1 << 20) + 1, ' ');
  req.set_model_config_path(big);
  refuse(req, grpc::StatusCode::INVALID_ARGUMENT, "the limit for this file is 1048576");
  req = Request();
  req.mutable_lora()->set_rank(0);
  refuse(req, grpc::StatusCode::INVALID_ARGUMENT, "LoRA rank 0");
  req = Request();
  req.mutable_lora()->set_dropout(1.5f);
  refuse(req, grpc::StatusCode::INVALID_ARGUMENT, "LoRA dropout 1.5");
  req = Request();
  req.set_next_address("nowhere");
  refuse(req, grpc::StatusCode::INVALID_ARGUMENT, "next_address 'nowhere' is not host:port");
  req = Request();
  req.set_dtype("fp7");
  refuse(req, grpc::StatusCode::INVALID_ARGUMENT, "fp7");
  req = Request();
  req.set_device("tpu");
  refuse(req, grpc::StatusCode::INVALID_ARGUMENT, "unknown device 'tpu'");
  req = Request();
  req.set_block_end(99);
  refuse(req, grpc::StatusCode::INVALID_ARGUMENT, "block range [0, 99)");
  req = Request();
  req.set_micro_batches(0);
  refuse(req, grpc::StatusCode::INVALID_ARGUMENT, "micro_batches 0");
  ExpectRealStep(1);  // the job configured before every one of those still runs
}

}  // namespace
}  // namespace baton
