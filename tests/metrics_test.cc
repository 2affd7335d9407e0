// Metrics end to end: a 2-stage run on loopback with --metrics (the coordinator in this process, the stage
// workers real processes on ports the coordinator gave them), scraped over HTTP while the workers are still up;
// RPC errors counted on both ends of a real call; the binaries' --metrics flag.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "coordinator/coordinator_metrics.h"
#include "coordinator/pipeline_trainer.h"
#include "core/data/cache.h"
#include "core/metrics/families.h"
#include "core/metrics/metrics_server.h"
#include "core/model/flux2_weights.h"
#include "core/testing/paths.h"
#include "core/testing/prometheus_scrape.h"
#include "core/testing/run_command.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"
#include "core/util/status.h"
#include "stage_driver/local_tls.h"
#include "stage_driver/local_workers.h"
#include "stage_driver/stage_client.h"

namespace baton {
namespace {

using test_util::BinDir;
using test_util::HttpGet;
using test_util::SumSamples;

// What the run saw on its last step, while every process was up.
struct Scrapes {
  nlohmann::json targets;
  std::string coordinator;
  std::vector<std::string> stages;
};

absl::StatusOr<Scrapes> ScrapeEveryTarget(const std::string& output_dir) {
  Scrapes out;
  ASSIGN_OR_RETURN(std::string text, ReadFile(JoinPath(output_dir, "prometheus_targets.json")));
  out.targets = nlohmann::json::parse(text);
  for (const auto& group : out.targets) {
    ASSIGN_OR_RETURN(std::string body, HttpGet(group["targets"][0].get<std::string>()));
    if (group["labels"]["baton_process"] == "coordinator") {
      out.coordinator = body;
    } else {
      out.stages.push_back(body);
    }
  }
  return out;
}

TEST(MetricsRunTest, TwoStageRunExposesStepsLinksAndStageSeconds) {
  const std::string dir = test_util::MakeTempDir("metrics_run");
  Flux2Config c = test_util::TinyFlux2Config();
  ASSERT_TRUE(WriteRandomFlux2Weights(c, JoinPath(dir, "model"), 1).ok());
  ASSERT_TRUE(
      WriteSyntheticCache(JoinPath(dir, "cache"), c.in_channels, c.joint_attention_dim, 8, {{2, 2}}, 5, 3).ok());
  auto job = ParseJobYaml(absl::StrCat("name: metrics-tiny\nmodel: ", JoinPath(dir, "model"),
                                       "\ndataset: ", JoinPath(dir, "cache"),
                                       "\nlora: {rank: 4}\nsteps: 3\nbatch_size: 2\nmicro_batches: 2\nseed: 3\n"));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(JobName(*job), "metrics-tiny");

  auto server = MetricsServer::Start("127.0.0.1:0", "coordinator");
  ASSERT_TRUE(server.ok()) << server.status();
  CoordinatorOptions o;
  o.stages = 2;
  o.output_dir = JoinPath(dir, "out");
  o.stage_worker_binary = JoinPath(BinDir(), "stage_worker");
  o.rpc_timeout = absl::Seconds(60);
  o.quiet = true;
  o.metrics_listen = "127.0.0.1:0";
  o.metrics_address = (*server)->address();
  absl::StatusOr<Scrapes> scrapes = absl::UnknownError("the last step never came");
  o.hooks.on_step = [&](const PipelineStepRecord& rec) {
    if (rec.step == 3) scrapes = ScrapeEveryTarget(o.output_dir);
  };
  AddMetricsHooks(JobName(*job), &o.hooks);  // runs before the scrape above
  auto run = RunCoordinator(*job, o);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_TRUE(scrapes.ok()) << scrapes.status();

  // prometheus_targets.json: the coordinator, then each stage with its own port.
  ASSERT_EQ(scrapes->targets.size(), 3u) << scrapes->targets.dump();
  EXPECT_EQ(scrapes->targets[0]["targets"][0], (*server)->address());
  EXPECT_EQ(scrapes->targets[0]["labels"]["baton_process"], "coordinator");
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(scrapes->targets[1 + i]["labels"]["baton_process"], "stage_worker");
    EXPECT_EQ(scrapes->targets[1 + i]["labels"]["stage"], absl::StrCat(i));
  }
  EXPECT_NE(scrapes->targets[1]["targets"][0], scrapes->targets[2]["targets"][0]);

  const std::map<std::string, std::string> job_label = {{"job", "metrics-tiny"}};
  const std::string& co = scrapes->coordinator;
  EXPECT_EQ(SumSamples(co, "baton_steps_completed_total", job_label), 3);
  EXPECT_EQ(SumSamples(co, "baton_step", job_label), 3);
  EXPECT_EQ(SumSamples(co, "baton_steps_target", job_label), 3);
  EXPECT_EQ(SumSamples(co, "baton_step_duration_seconds_count", job_label), 3);
  EXPECT_NEAR(SumSamples(co, "baton_loss", job_label), run->steps.back().loss, 1e-6);
  EXPECT_NEAR(SumSamples(co, "baton_learning_rate", job_label), run->steps.back().lr, 1e-12);
  EXPECT_GT(SumSamples(co, "baton_gradient_norm", job_label), 0);
  EXPECT_GT(SumSamples(co, "baton_samples_per_second", job_label), 0);
  EXPECT_EQ(SumSamples(co, "baton_stage_up", {{"job", "metrics-tiny"}, {"stage", "0"}}), 1);
  EXPECT_EQ(SumSamples(co, "baton_stage_up", {{"job", "metrics-tiny"}, {"stage", "1"}}), 1);

  ASSERT_EQ(scrapes->stages.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const std::string& st = scrapes->stages[i];
    const std::map<std::string, std::string> labels = {{"job", "metrics-tiny"}, {"stage", absl::StrCat(i)}};
    EXPECT_EQ(SumSamples(st, "baton_build_info", {{"process", "stage_worker"}}), 1) << st;
    EXPECT_EQ(SumSamples(st, "baton_worker_configured", labels), 1) << st;
    EXPECT_GT(SumSamples(st, "baton_stage_forward_seconds_total", labels), 0) << st;
    EXPECT_GT(SumSamples(st, "baton_stage_backward_seconds_total", labels), 0) << st;
    EXPECT_GE(SumSamples(st, "baton_stage_idle_seconds_total", labels), 0) << st;
    EXPECT_EQ(SumSamples(st, "baton_microbatches_in_flight", labels), 0) << "between steps nothing is in flight";
    EXPECT_GT(SumSamples(st, "baton_process_resident_memory_bytes"), 1 << 20);
    // Every stage gets constants from the coordinator and sends it its LoRA gradients, or its state when the
    // coordinator reads it back (a checkpoint: the stage-local optimizer's default).
    auto link = [&](const std::string& peer) {
      return std::map<std::string, std::string>{{"job", "metrics-tiny"}, {"stage", absl::StrCat(i)}, {"peer", peer}};
    };
    EXPECT_GT(SumSamples(st, "baton_link_received_bytes_total", link("coordinator")), 0) << st;
    EXPECT_GT(SumSamples(st, "baton_link_sent_bytes_total", link("coordinator")), 0) << st;
    // Activations go 0 → 1, their gradients 1 → 0.
    const std::string other = absl::StrCat("stage", 1 - i);
    EXPECT_GT(SumSamples(st, "baton_link_sent_bytes_total", link(other)), 0) << st;
    EXPECT_GT(SumSamples(st, "baton_link_received_bytes_total", link(other)), 0) << st;
    EXPECT_GT(SumSamples(st, "baton_link_transfer_seconds_total", link(other)), 0) << st;
  }
  // What stage 0 sent to stage 1 is what stage 1 got from stage 0.
  EXPECT_EQ(SumSamples(scrapes->stages[0], "baton_link_sent_bytes_total", {{"peer", "stage1"}}),
            SumSamples(scrapes->stages[1], "baton_link_received_bytes_total", {{"peer", "stage0"}}));

  // The final checkpoint came after the last step's scrape.
  auto after = HttpGet((*server)->address());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(SumSamples(*after, "baton_checkpoint_duration_seconds_count", job_label), 1);
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  EXPECT_NEAR(SumSamples(*after, "baton_checkpoint_last_success_timestamp_seconds", job_label), now, 60);
}

// A call the worker refuses is one error on each side, by method and code.
TEST(MetricsRunTest, RpcErrorsAreCountedOnBothEnds) {
  auto server = MetricsServer::Start("127.0.0.1:0", "coordinator");
  ASSERT_TRUE(server.ok()) << server.status();
  LocalWorkerOptions lopts;
  lopts.binary = JoinPath(BinDir(), "stage_worker");
  lopts.worker_args = {{"--metrics=127.0.0.1:0"}};
  lopts.extra_args = *LocalWorkerSecurityArgs();  // mutual TLS with the ephemeral CA, as the coordinator does
  auto workers = LocalWorkers::Start(1, lopts);
  ASSERT_TRUE(workers.ok()) << workers.status();
  const std::string worker_metrics = (*workers)->metrics_addresses()[0];
  ASSERT_FALSE(worker_metrics.empty());

  auto before = HttpGet(worker_metrics);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(SumSamples(*before, "baton_worker_configured", {{"job", ""}, {"stage", ""}}), 0);
  EXPECT_EQ(SumSamples(*before, "baton_rpc_errors_total"), -1) << *before;

  StageClient client(0, (*workers)->addresses()[0], absl::Seconds(10));
  ASSERT_TRUE(client.WaitReady(absl::Seconds(10)).ok());
  v1::StepPlan plan;
  plan.set_job_id("nobody-configured-me");
  TensorMap grads;
  auto step = client.RunStep(plan, &grads);
  ASSERT_EQ(step.status().code(), absl::StatusCode::kFailedPrecondition) << step.status();

  const std::map<std::string, std::string> server_side = {
      {"side", "server"}, {"method", "StageService/RunStep"}, {"code", "FAILED_PRECONDITION"}};
  auto worker = HttpGet(worker_metrics);
  ASSERT_TRUE(worker.ok()) << worker.status();
  EXPECT_EQ(SumSamples(*worker, "baton_rpc_errors_total", server_side), 1) << *worker;
  auto self = HttpGet((*server)->address());
  ASSERT_TRUE(self.ok()) << self.status();
  EXPECT_EQ(SumSamples(*self, "baton_rpc_errors_total",
                       {{"side", "client"}, {"method", "StageService/RunStep"}, {"code", "FAILED_PRECONDITION"}}),
            1)
      << *self;
  ASSERT_TRUE((*workers)->Stop().ok());
}

TEST(MetricsFlagTest, BinariesRefuseAMalformedMetricsAddress) {
  for (const std::string binary : {"coordinator", "stage_worker", "encoder_worker"}) {
    // coordinator and encoder_worker check their required flags first; give them enough to get to --metrics.
    const std::string extra = binary == "coordinator"      ? " --job /nonexistent.yaml"
                              : binary == "encoder_worker" ? " --model /nonexistent --listen 127.0.0.1:0 --insecure"
                                                           : " --insecure";
    auto r = test_util::RunCommand(absl::StrCat(JoinPath(BinDir(), binary), extra, " --metrics 127.0.0.1:http"),
                                   /*with_stderr=*/true);
    EXPECT_EQ(r.exit_code, 2) << binary << ": " << r.output;
    EXPECT_NE(r.output.find("--metrics '127.0.0.1:http': port 'http' is not a number"), std::string::npos)
        << binary << ": " << r.output;
  }
}

}  // namespace
}  // namespace baton
