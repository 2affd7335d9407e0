// The stage-local optimizer's exchange (PeerExchange) over fake stage workers whose optimizer sums over in-process
// groups (stage_driver/testing/fake_optimizer.h), without a process: the held sums reduced and applied by every
// stage; a replica lost in the reduction starts the step over on the others and the adapters come out as the
// uninterrupted run's; one replica whose stage lost its state rolls back to the coordinator's copy, or is loaded with
// it when the copy is current. tests/replicas_test.cc runs the same over real workers and c10d Gloo.
#include "coordinator/peer_exchange.h"

#include <absl/strings/str_cat.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "coordinator/testing/fake_replicas.h"
#include "core/util/status.h"

namespace baton {
namespace {

constexpr double kLr = 0.125;  // a power of two: the expected adapters are exact
constexpr int kMicroBatches = 4;

OptimizerConfig Sgd() {
  OptimizerConfig o;
  o.lr = kLr;
  o.clip = 0;  // no clipping: the fake's update is adapter -= lr x the summed gradient
  return o;
}

// A run's exchange over fake replicas, wired as the coordinator wires it (pipeline_trainer.cc).
struct Exchanged {
  std::unique_ptr<FakeReplicas> replicas;
  std::unique_ptr<PeerExchange> exchange;
  Optimizer optimizer{Sgd()};
  std::map<std::string, at::Tensor> master;

  static std::unique_ptr<Exchanged> Start(int replica_count) {
    auto e = std::make_unique<Exchanged>();
    auto started = FakeReplicas::Start(replica_count, 2, kMicroBatches, /*local_optimizer=*/true);
    EXPECT_TRUE(started.ok()) << started.status();
    if (!started.ok()) return nullptr;
    e->replicas = std::move(*started);
    e->master = e->replicas->Master();
    e->exchange = std::make_unique<PeerExchange>(Sgd(), &e->replicas->set(), absl::Seconds(10));
    absl::Status s = e->exchange->Start(e->master, e->optimizer);
    EXPECT_TRUE(s.ok()) << s;
    return s.ok() ? std::move(e) : nullptr;
  }

  // One step run and applied, started over when a replica was lost after its slice counted (RunAndApply's loop).
  absl::StatusOr<ExchangeResult> Step(int64_t step, int* restarts = nullptr) {
    for (int attempt = 0;; ++attempt) {
      const bool early = exchange->BeforeStep(step, replicas->set().StepReplicas(step));
      ASSIGN_OR_RETURN(StepOutputs out, replicas->Run(step, kMicroBatches, early, exchange.get()));
      std::vector<int> participants;
      for (size_t r = 0; r < out.replica_micro_batches.size(); ++r) {
        if (out.replica_micro_batches[r] > 0) participants.push_back(static_cast<int>(r));
      }
      const auto& l = out.summaries.back().losses();
      absl::StatusOr<ExchangeResult> applied =
          exchange->Apply(step, participants, std::vector<double>(l.begin(), l.end()), kLr);
      if (applied.ok() || !absl::IsAborted(applied.status()) || attempt >= 2) return applied;
      if (restarts != nullptr) ++*restarts;
      RETURN_IF_ERROR(replicas->set().RestartStep(step));
    }
  }
};

// The adapters after `steps` steps by the fake's rule: each of stage s's i-th adapter less, per step k, lr x its
// summed gradient (k + 1 + i) x the micro-batches.
std::map<std::string, at::Tensor> Expected(int64_t steps) {
  std::map<std::string, at::Tensor> out;
  for (int s = 0; s < 2; ++s) {
    for (int i = 0; i < 2; ++i) {
      at::Tensor a = at::zeros({4});
      for (int64_t k = 0; k < steps; ++k) a = a - at::full({4}, static_cast<float>((k + 1 + i) * kMicroBatches)) * kLr;
      out[absl::StrCat("s", s, i == 0 ? ".a" : ".b")] = a;
    }
  }
  return out;
}

void ExpectAdapters(Exchanged& e, int64_t steps) {
  ASSERT_TRUE(e.exchange->Pull(e.master, e.optimizer).ok());
  EXPECT_EQ(e.optimizer.steps(), steps);
  for (const auto& [name, want] : Expected(steps)) {
    EXPECT_TRUE(at::equal(e.master.at(name), want)) << name << ": " << e.master.at(name) << " want " << want;
  }
}

TEST(PeerExchangeTest, TwoReplicasSumTheirHeldGradientsAndEveryStageUpdates) {
  auto e = Exchanged::Start(2);
  ASSERT_NE(e, nullptr);
  for (int64_t step = 0; step < 2; ++step) {
    absl::StatusOr<ExchangeResult> r = e->Step(step);
    ASSERT_TRUE(r.ok()) << r.status();
    // The global norm over both stages' two adapters of 4 elements, each the group's sum (k + 1 + i) x 4.
    double squares = 0;
    for (int i = 0; i < 2; ++i) squares += 2 * 4 * std::pow((step + 1 + i) * 4.0, 2);
    EXPECT_DOUBLE_EQ(r->grad_norm, std::sqrt(squares));
  }
  ExpectAdapters(*e, 2);
  for (int w = 0; w < 4; ++w) {
    for (const v1::StepPlan& plan : e->replicas->worker(w).plans()) {
      EXPECT_EQ(plan.gradients(), v1::StepPlan::HOLD_NEW) << "each replica holds its own slice's sum";
      EXPECT_TRUE(plan.own_adapters()) << "no adapters pushed: the stages keep theirs";
    }
  }
}

TEST(PeerExchangeTest, AReplicaLostInTheReductionStartsTheStepOverAndTheAdaptersAreTheUninterruptedRuns) {
  auto e = Exchanged::Start(2);
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->Step(0).ok());
  e->replicas->worker(3).FailCall("Reduce", absl::UnavailableError("connection reset by peer"));
  int restarts = 0;
  absl::StatusOr<ExchangeResult> r = e->Step(1, &restarts);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(restarts, 1) << "the step started over once";
  EXPECT_EQ(e->replicas->recoveries(), (std::vector<std::pair<int64_t, int>>{{2, -1}}))
      << "replica 1 taken out at step 2; replica 0's ABORTED sum was its peer's fault, not a loss";
  ASSERT_TRUE(e->Step(2).ok());
  ExpectAdapters(*e, 3);
}

TEST(PeerExchangeTest, AReplicaLostDuringItsSliceCostsNothingAndComesBackLoadedWithTheCurrentState) {
  auto e = Exchanged::Start(2);
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->Step(0).ok());
  e->replicas->worker(2).Kill();  // replica 1's stage 0, with its state
  absl::StatusOr<ExchangeResult> r = e->Step(1);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(e->replicas->worker(2).Restart().ok());
  e->replicas->set().SettleReplica(1);
  ASSERT_TRUE(e->replicas->set().Ready(1));
  e->replicas->worker(2).ClearRecords();
  ASSERT_TRUE(e->Step(2).ok());  // replica 1 back: loaded from replica 0 before its slice
  int loads = 0;
  for (const ReceivedEnvelope& env : e->replicas->worker(2).pushes()) {
    loads += env.header.kind() == v1::EnvelopeHeader::LORA_STATE;
  }
  EXPECT_EQ(loads, 1) << "loaded with the run's current state once";
  ExpectAdapters(*e, 3);
}

TEST(PeerExchangeTest, OneReplicaWhoseStageLostItsStateRollsBackToTheCoordinatorsCopy) {
  auto e = Exchanged::Start(1);
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->Step(0).ok());
  ASSERT_TRUE(e->Step(1).ok());
  e->replicas->worker(1).Kill();  // its state dies with it; the copy is the start's
  std::thread restart([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_TRUE(e->replicas->worker(1).Restart().ok());
  });
  absl::StatusOr<ExchangeResult> lost = e->Step(2);
  restart.join();
  ASSERT_FALSE(lost.ok());
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kDataLoss) << lost.status();
  EXPECT_NE(lost.status().message().find("the coordinator holds those of step 0"), std::string::npos) << lost.status();
  EXPECT_TRUE(e->exchange->StateLost());
  absl::StatusOr<int64_t> updates = e->exchange->RollBack();
  ASSERT_TRUE(updates.ok()) << updates.status();
  EXPECT_EQ(*updates, 0) << "the coordinator's copy is the start state";
  e->replicas->set().Rewind();
  for (int64_t step = 0; step < 3; ++step) ASSERT_TRUE(e->Step(step).ok()) << "redo of step " << step + 1;
  ExpectAdapters(*e, 3);
}

TEST(PeerExchangeTest, OneReplicaWhoseStageLostItsStateAfterAReadBackIsLoadedWithIt) {
  auto e = Exchanged::Start(1);
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->Step(0).ok());
  ASSERT_TRUE(e->exchange->Pull(e->master, e->optimizer).ok());  // a checkpoint's read-back: the copy is current
  e->replicas->worker(1).Kill();
  std::thread restart([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_TRUE(e->replicas->worker(1).Restart().ok());
  });
  absl::StatusOr<ExchangeResult> r = e->Step(1);
  restart.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(e->exchange->StateLost());
  ExpectAdapters(*e, 2);
}

}  // namespace
}  // namespace baton
