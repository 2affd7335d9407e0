#include "coordinator/pipeline_trainer.h"

#include <ATen/Parallel.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <future>
#include <optional>
#include <set>
#include <thread>

#include "coordinator/checkpoint.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/encoder_client.h"
#include "coordinator/local_workers.h"
#include "coordinator/stage_client.h"
#include "coordinator/stage_fleet.h"
#include "core/data/cache.h"
#include "core/lora/lora.h"
#include "core/model/flux2_weights.h"
#include "core/pipeline/chunks.h"
#include "core/pipeline/partition.h"
#include "core/pipeline/schedule.h"
#include "core/pipeline/stage_io.h"
#include "core/quant/weight_quant.h"
#include "core/train/adamw.h"
#include "core/train/batches.h"
#include "core/train/common.h"
#include "core/train/finite_check.h"
#include "core/train/init_lora.h"
#include "core/util/files.h"
#include "core/util/log.h"
#include "core/util/status.h"
#include "core/util/threads.h"

namespace baton {
namespace {

std::atomic<bool> g_stop_requested{false};

// A stop asked for by a signal (RequestCoordinatorStop) or by the job service (hooks.stop).
bool StopRequested(const CoordinatorOptions& options) {
  return g_stop_requested.load() || (options.hooks.stop != nullptr && options.hooks.stop->load());
}
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string ProgressBar(int64_t done, int64_t total, int width) {
  int filled = total > 0 ? static_cast<int>(width * done / total) : width;
  return absl::StrCat("[", std::string(filled, '#'), std::string(width - filled, '.'), "]");
}

// Rewrites train_log.jsonl keeping only the lines of steps ≤ `last_step` (a resumed run re-logs the rest).
absl::Status TrimTrainLog(const std::string& path, int64_t last_step) {
  if (!PathExists(path)) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  std::string kept;
  size_t start = 0;
  for (int line_number = 1; start < text.size(); ++line_number) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) break;  // a torn last line is dropped
    std::string line = text.substr(start, end - start);
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) {
      return absl::DataLossError(absl::StrCat(path, ":", line_number,
                                              ": not a step record with an integer \"step\" (a train_log.jsonl line "
                                              "is one JSON object per step); fix or remove the line to resume"));
    }
    if (j["step"].get<int64_t>() <= last_step) kept += line + "\n";
    start = end + 1;
  }
  return WriteFileAtomic(path, kept);
}

absl::Status CheckOptions(const CoordinatorOptions& options) {
  if (options.stages < 1) return absl::InvalidArgumentError("--stages must be ≥ 1");
  if (!options.workers.empty() && static_cast<int>(options.workers.size()) != options.stages) {
    return absl::InvalidArgumentError(
        absl::StrCat("--workers lists ", options.workers.size(), " addresses for ", options.stages, " stages"));
  }
  return absl::OkStatus();
}

// The planner's options: sized for the cache's largest micro-batch (memory) and its token mix (compute).
absl::StatusOr<PartitionOptions> StagePartitionOptions(const JobConfig& job, const CacheReader& cache, int stages,
                                                       at::ScalarType dtype) {
  PartitionOptions popts;
  popts.stages = stages;
  popts.bytes_per_param = static_cast<int>(c10::elementSize(dtype));
  ASSIGN_OR_RETURN(popts.quantize, ParseWeightQuant(job.quantize));
  popts.lora_rank = job.lora.rank;
  popts.micro_batches = static_cast<int>(job.micro_batches);
  ASSIGN_OR_RETURN(popts.schedule, ParseScheduleKind(job.schedule));
  popts.recompute = job.recompute;
  popts.device = !job.devices.empty() && job.devices[0] != "cpu" ? PlanDevice::kCuda : PlanDevice::kCpu;
  popts.activation_bytes = static_cast<int>(c10::elementSize(dtype));
  popts.all_linear = job.lora_targets == "all-linear";
  int64_t max_img = 0, max_txt = 0;
  for (const CacheRecordInfo& r : cache.index().records) {
    max_img = std::max(max_img, r.grid_h * r.grid_w);
    max_txt = std::max(max_txt, r.text_len);
  }
  popts.tokens_per_micro_batch = (max_img + max_txt) * job.micro_batch_size();
  popts.text_tokens_per_micro_batch = max_txt * job.micro_batch_size();
  for (const auto& budget : job.memory_per_stage) {
    auto bytes = ParseByteSize(budget);
    if (!bytes.ok()) return Annotate(bytes.status(), absl::StrCat(job.source, ": memory_per_stage"));
    popts.memory_budget_bytes.push_back(*bytes);
  }
  return popts;
}

// What each worker runs: [worker][chunk] block ranges -- one per worker, or v (interleaved) -- from the planner:
// blocks to stages (or to p·v chunks) by compute, within each worker's memory budget. Prints the plan.
absl::StatusOr<std::vector<std::vector<StageSpec>>> PlanStages(const JobConfig& job, const Flux2Config& config,
                                                               const CacheReader& cache, int stages, int chunks,
                                                               at::ScalarType dtype, bool quiet) {
  ASSIGN_OR_RETURN(PartitionOptions popts, StagePartitionOptions(job, cache, stages, dtype));
  std::vector<std::vector<StageSpec>> out(stages);
  if (chunks == 1) {
    ASSIGN_OR_RETURN(Plan plan, PartitionFlux2(config, popts));
    if (!quiet) std::printf("%s", RenderPlan(config, plan).c_str());
    if (!plan.fits) return absl::ResourceExhaustedError(absl::StrCat("the model does not fit: ", plan.message));
    for (int i = 0; i < stages; ++i) out[i] = {plan.stages[i]};
    return out;
  }
  popts.schedule = ScheduleKind::kInterleaved1F1B;
  // Chunks are not sized one by one: recompute is all or nothing per job. auto: none when that fits.
  const RecomputePolicy asked = popts.recompute;
  if (asked == RecomputePolicy::kAuto) popts.recompute = RecomputePolicy::kNone;
  ASSIGN_OR_RETURN(ChunkPlan plan, PartitionFlux2Chunks(config, popts, chunks));
  if (!plan.fits && asked == RecomputePolicy::kAuto) {
    popts.recompute = RecomputePolicy::kAll;
    ASSIGN_OR_RETURN(plan, PartitionFlux2Chunks(config, popts, chunks));
  }
  if (!quiet) std::printf("%s", RenderChunkPlan(config, plan).c_str());
  if (!plan.fits) return absl::ResourceExhaustedError(absl::StrCat("the model does not fit: ", plan.message));
  const bool recompute = popts.recompute != RecomputePolicy::kNone;
  if (!quiet) std::printf("recompute: %s (interleaved: every block or none)\n", recompute ? "every block" : "none");
  for (int i = 0; i < stages; ++i) {
    for (int u : WorkerVirtualStages(stages, chunks, i)) {
      StageSpec spec = plan.virtual_stages[u];
      spec.recompute_blocks = recompute ? spec.block_end - spec.block_begin : 0;
      out[i].push_back(spec);
    }
  }
  return out;
}

// Workers: embedded local processes (started here, into *local), or the ones given. Returns their addresses.
absl::StatusOr<std::vector<std::string>> StartWorkers(const JobConfig& job, const CoordinatorOptions& options,
                                                      std::unique_ptr<LocalWorkers>* local) {
  if (!options.workers.empty()) {
    if (!options.metrics_address.empty()) {  // remote workers' metrics ports are their operators' to list
      RETURN_IF_ERROR(PublishMetricsTargets(options.output_dir, options.metrics_address, {}, !options.quiet));
    }
    return options.workers;
  }
  LocalWorkerOptions lopts;
  if (!options.stage_worker_binary.empty()) lopts.binary = options.stage_worker_binary;
  lopts.threads = job.threads;
  int wait_s = options.worker_wait_timeout_s > 0 ? options.worker_wait_timeout_s
                                                 : static_cast<int>(absl::ToInt64Seconds(options.rpc_timeout));
  lopts.extra_args = {absl::StrCat("--wait_timeout_s=", wait_s)};
  // Workers read models only inside their --model_root: ours may read exactly the job's model files.
  // (A model that does not resolve gets no root here; the worker's Configure then names what is missing.)
  if (auto root = CommonRoot({job.model, job.model_config}); root.ok()) {
    lopts.extra_args.push_back(absl::StrCat("--model_root=", *root));
  }
  for (int i = 0; i < options.stages && !options.metrics_listen.empty(); ++i) {
    ASSIGN_OR_RETURN(std::string listen, StageMetricsListen(options.metrics_listen, i));
    lopts.worker_args.push_back({absl::StrCat("--metrics=", listen)});
  }
  ASSIGN_OR_RETURN(*local, LocalWorkers::Start(options.stages, lopts));
  std::vector<std::string> addresses = (*local)->addresses();
  if (!options.quiet) {
    std::printf("started %d local stage workers: %s\n", options.stages, absl::StrJoin(addresses, ", ").c_str());
  }
  if (!options.metrics_address.empty()) {
    RETURN_IF_ERROR(PublishMetricsTargets(options.output_dir, options.metrics_address, (*local)->metrics_addresses(),
                                          !options.quiet));
  }
  return addresses;
}

// Worker i's request; `chunks` holds its one block range, or its v chunks (interleaved: the neighbours wrap
// around, worker p-1's outputs feeding worker 0's next chunk).
v1::ConfigureRequest ConfigureRequestFor(const JobConfig& job, const std::string& job_id,
                                         const std::vector<StageSpec>& chunks, int i,
                                         const std::vector<std::string>& addresses) {
  const int p = static_cast<int>(addresses.size());
  const StageSpec& spec = chunks.front();
  v1::ConfigureRequest req;
  req.set_job_id(job_id);
  req.set_job_name(JobName(job));
  req.set_config_hash(job_id);
  req.set_micro_batches(static_cast<int32_t>(job.micro_batches));
  req.set_stage_index(i);
  req.set_num_stages(p);
  req.set_model_path(job.model);
  req.set_model_config_path(job.model_config);
  req.set_block_begin(static_cast<int32_t>(spec.block_begin));
  req.set_block_end(static_cast<int32_t>(spec.block_end));
  req.set_has_embedders(spec.has_embedders);
  req.set_has_head(spec.has_head);
  req.set_dtype(job.dtype);
  // Without `devices:` in the job each worker computes on its own --device (local workers: cpu).
  if (i < static_cast<int>(job.devices.size())) req.set_device(job.devices[i]);
  // The planner's per-stage decision (recompute: auto decides from the budget; true = all, false = none).
  // Interleaved: every chunk of every worker got the same all-or-nothing decision (PlanStages).
  if (chunks.size() > 1) {
    req.set_recompute(spec.recompute_blocks > 0);
  } else {
    req.set_recompute(spec.recompute_blocks > 0);
    req.set_recompute_blocks(static_cast<int32_t>(spec.recompute_blocks));
  }
  req.set_quantize(job.quantize);
  req.mutable_lora()->set_rank(static_cast<int32_t>(job.lora.rank));
  req.mutable_lora()->set_alpha(static_cast<float>(job.lora.alpha));
  for (const auto& t : job.lora.targets) req.mutable_lora()->add_targets(t);
  req.mutable_lora()->set_dropout(static_cast<float>(job.lora.dropout));
  if (i + 1 < p) req.set_next_address(addresses[i + 1]);
  if (i > 0) req.set_prev_address(addresses[i - 1]);
  if (chunks.size() > 1) {
    for (const StageSpec& c : chunks) {
      v1::StageChunk* ch = req.add_chunks();
      ch->set_block_begin(static_cast<int32_t>(c.block_begin));
      ch->set_block_end(static_cast<int32_t>(c.block_end));
      ch->set_has_embedders(c.has_embedders);
      ch->set_has_head(c.has_head);
    }
    req.set_next_address(addresses[(i + 1) % p]);
    req.set_prev_address(addresses[(i + p - 1) % p]);
  }
  req.set_threads(job.threads);
  req.set_seed(job.seed);
  req.set_wire_dtype(job.wire_dtype);
  return req;
}

// Connects to every stage and configures it with its slice; the fleet learns which LoRA parameters each holds.
absl::Status ConnectAndConfigure(const JobConfig& job, const CoordinatorOptions& options,
                                 const std::vector<std::vector<StageSpec>>& plan,
                                 const std::vector<std::string>& addresses, StageFleet* fleet) {
  const int p = static_cast<int>(addresses.size());
  for (int i = 0; i < p; ++i) {
    fleet->clients.push_back(std::make_unique<StageClient>(i, addresses[i], options.rpc_timeout));
    if (!options.metrics_address.empty())
      fleet->clients.back()->set_up_gauge(StageUpGauge(JobName(job), i, addresses[i]));
  }
  auto stop = [&] { return StopRequested(options); };
  RETURN_IF_ERROR(ParallelFor(p, [&](int i) { return fleet->clients[i]->WaitReady(options.connect_timeout, stop); }));
  fleet->params.assign(p, {});
  fleet->rope.assign(p, RopeMirror());
  return ParallelFor(p, [&](int i) -> absl::Status {
    ASSIGN_OR_RETURN(v1::ConfigureResponse resp,
                     fleet->clients[i]->Configure(ConfigureRequestFor(job, fleet->job_id, plan[i], i, addresses)));
    fleet->params[i].assign(resp.lora_param_names().begin(), resp.lora_param_names().end());
    return absl::OkStatus();
  });
}

// Trainable state at the start: the newest checkpoint when resuming (its optimizer state goes into `optimizer`),
// else the stages' own seeded init, or the job's init_lora.
struct StartState {
  std::map<std::string, at::Tensor> master;  // fp32 LoRA masters by PEFT name
  int64_t step = 0;
  bool resumed = false;
};

absl::StatusOr<StartState> LoadStartState(const JobConfig& job, const CoordinatorOptions& options, StageFleet& fleet,
                                          AdamW& optimizer) {
  StartState start;
  std::optional<TrainingState> resumed;
  if (options.resume) {
    auto state = LoadLatestCheckpoint(options.output_dir);
    if (state.ok()) {
      if (state->job_hash != fleet.job_id) {
        return absl::FailedPreconditionError(absl::StrCat("checkpoint in ", options.output_dir,
                                                          " is from another job (", state->job_hash, " vs ",
                                                          fleet.job_id, ")"));
      }
      resumed = std::move(*state);
    } else if (state.status().code() != absl::StatusCode::kNotFound) {
      return state.status();
    } else if (!options.quiet) {
      std::printf("--resume: no checkpoint in %s, starting fresh\n", options.output_dir.c_str());
    }
  }
  if (resumed) {
    start.master = resumed->lora;
    RETURN_IF_ERROR(optimizer.LoadStateDict(resumed->optimizer));
    start.step = resumed->step;
    start.resumed = true;
    if (!options.quiet) std::printf("resuming from step %lld\n", static_cast<long long>(start.step));
  } else {
    for (auto& client : fleet.clients) {
      ASSIGN_OR_RETURN(TensorMap w, client->GetLora(fleet.job_id));
      for (auto& [name, t] : w) start.master[name] = t;
    }
    if (!job.init_lora.empty()) {
      ASSIGN_OR_RETURN(start.master, LoadInitLora(job.init_lora, job.lora, start.master));
    }
  }
  for (const auto& names : fleet.params) {
    for (const auto& name : names) {
      if (!start.master.count(name)) return absl::FailedPreconditionError(absl::StrCat("no master weight for ", name));
    }
  }
  if (start.master.empty()) return absl::InvalidArgumentError("no Linear matched the LoRA targets");
  return start;
}

// The optimizer step on the fp32 masters from the stages' gradients, and the step's record (times are the
// caller's to fill in).
absl::StatusOr<PipelineStepRecord> ApplyGradients(const JobConfig& job, int64_t step, const StepOutputs& outputs,
                                                  AdamW& optimizer, std::map<std::string, at::Tensor>& master) {
  std::map<std::string, at::Tensor> all_grads;
  for (const TensorMap& grads : outputs.grads) {
    for (auto& [name, g] : grads) all_grads[name] = g;
  }
  for (const auto& [name, w] : master) {
    if (!all_grads.count(name)) return absl::DataLossError(absl::StrCat("no gradient came back for ", name));
  }
  PipelineStepRecord rec;
  rec.step = step + 1;
  rec.lr = LearningRate(job.optimizer, step);
  const auto& losses = outputs.summaries.back().losses();
  const std::vector<double> micro_batch_losses(losses.begin(), losses.end());
  RETURN_IF_ERROR(CheckStepFinite(rec.step, rec.lr, micro_batch_losses, static_cast<int>(outputs.summaries.size()) - 1,
                                  outputs.grads));
  rec.grad_norm = ClipGradNorm(all_grads, job.optimizer.clip);
  RETURN_IF_ERROR(optimizer.Step(master, all_grads, rec.lr));
  double loss_sum = 0;
  for (double l : micro_batch_losses) loss_sum += l;
  rec.loss = loss_sum / static_cast<double>(job.micro_batches);
  for (const v1::StepSummary& s : outputs.summaries) {
    rec.stages.push_back({s.forward_seconds(), s.backward_seconds(), s.idle_seconds()});
  }
  return rec;
}

// A train_log.jsonl line: the step record plus per-stage busy/idle and the coordinator's own serial seconds.
nlohmann::ordered_json StepLine(const PipelineStepRecord& rec) {
  nlohmann::ordered_json line = StepRecordJson(rec);
  nlohmann::ordered_json busy = nlohmann::ordered_json::array(), idle = nlohmann::ordered_json::array();
  for (const StageStepStats& st : rec.stages) {
    busy.push_back(st.forward_seconds + st.backward_seconds);
    idle.push_back(st.idle_seconds);
  }
  line["stage_busy_seconds"] = busy;
  line["stage_idle_seconds"] = idle;
  line["coordinator_seconds"] = {{"prepare", rec.prepare_seconds}, {"optimizer", rec.optimizer_seconds}};
  return line;
}

void PrintProgress(const PipelineStepRecord& rec, int64_t start_step, int64_t total_steps, double elapsed, bool tty) {
  const int64_t done = rec.step - start_step, left = total_steps - rec.step;
  double eta = elapsed / static_cast<double>(done) * static_cast<double>(left);
  std::string busy_text;
  for (size_t i = 0; i < rec.stages.size(); ++i) {
    absl::StrAppend(&busy_text, i ? " " : "",
                    absl::StrFormat("%.2f", rec.stages[i].forward_seconds + rec.stages[i].backward_seconds));
  }
  // absl::StrCat, not " " + std::string: GCC 12 -O3 reports a false -Wrestrict on the latter.
  const std::string tail = tty ? absl::StrCat(" ", ProgressBar(rec.step, total_steps, 20)) : "\n";
  std::printf("%sstep %4lld/%lld  loss %.5f  lr %.2e  %.3f s/step  %.1f samples/s  busy[s] %s  ETA %.0fs%s",
              tty ? "\r\033[K" : "", static_cast<long long>(rec.step), static_cast<long long>(total_steps), rec.loss,
              rec.lr, rec.step_seconds, rec.samples_per_second, busy_text.c_str(), eta, tail.c_str());
  std::fflush(stdout);
}

}  // namespace

void RequestCoordinatorStop() { g_stop_requested = true; }

absl::Status CheckJobPlan(const JobConfig& job, int stages) {
  if (stages < 1) return absl::InvalidArgumentError("--stages must be ≥ 1");
  ASSIGN_OR_RETURN(at::ScalarType dtype, ParseDtype(job.dtype));
  ASSIGN_OR_RETURN(auto checkpoint, Flux2Checkpoint::Open(job.model, job.model_config));
  if (!job.encode.encoder_worker.empty()) return absl::OkStatus();  // the cache is built at run time
  const Flux2Config& config = checkpoint->config();
  ASSIGN_OR_RETURN(auto cache, CacheReader::Open(job.dataset));
  if (cache->index().latent_channels != config.in_channels || cache->index().text_dim != config.joint_attention_dim) {
    return absl::InvalidArgumentError(absl::StrCat("cache ", job.dataset, " does not fit the model (latent channels ",
                                                   cache->index().latent_channels, " vs ", config.in_channels, ")"));
  }
  ASSIGN_OR_RETURN(ScheduleKind kind, ParseScheduleKind(job.schedule));
  const int chunks = kind == ScheduleKind::kInterleaved1F1B ? static_cast<int>(job.chunks) : 1;
  auto schedule = MakeSchedule(kind, stages, static_cast<int>(job.micro_batches), chunks);
  if (!schedule.ok()) {
    return Annotate(schedule.status(), absl::StrCat(job.source, ": schedule: ", job.schedule, " with micro_batches: ",
                                                    job.micro_batches, ", chunks: ", chunks, " on --stages ", stages));
  }
  return PlanStages(job, config, *cache, stages, chunks, dtype, /*quiet=*/true).status();
}

absl::StatusOr<CoordinatorResult> RunCoordinator(const JobConfig& job, const CoordinatorOptions& options) {
  RETURN_IF_ERROR(CheckOptions(options));
  const int p = options.stages;
  const int64_t total_steps = options.steps > 0 ? options.steps : job.steps;
  const int m = static_cast<int>(job.micro_batches);
  SetComputeThreads(job.threads);
  ASSIGN_OR_RETURN(at::ScalarType dtype, ParseDtype(job.dtype));
  ASSIGN_OR_RETURN(auto checkpoint, Flux2Checkpoint::Open(job.model, job.model_config));
  const Flux2Config& config = checkpoint->config();
  if (!job.encode.encoder_worker.empty()) RETURN_IF_ERROR(EncodeOnWorker(job, options.rpc_timeout, options.quiet));
  ASSIGN_OR_RETURN(auto cache, CacheReader::Open(job.dataset));
  if (cache->index().latent_channels != config.in_channels || cache->index().text_dim != config.joint_attention_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cache ", job.dataset, " does not fit the model (latent channels ", cache->index().latent_channels, " vs ",
        config.in_channels, ", text dim ", cache->index().text_dim, " vs ", config.joint_attention_dim, ")"));
  }
  ASSIGN_OR_RETURN(StepSampler sampler, StepSampler::Create(cache.get(), job, config.guidance_embeds));
  ASSIGN_OR_RETURN(Flux2Shell shell, BuildFlux2Shell(*checkpoint, dtype, at::kCPU));

  StageFleet fleet;
  fleet.job_id = JobHash(job);
  ASSIGN_OR_RETURN(ScheduleKind kind, ParseScheduleKind(job.schedule));
  const int chunks = kind == ScheduleKind::kInterleaved1F1B ? static_cast<int>(job.chunks) : 1;
  auto schedule = MakeSchedule(kind, p, m, chunks);
  if (!schedule.ok()) {
    return Annotate(schedule.status(), absl::StrCat(job.source, ": schedule: ", job.schedule, " with micro_batches: ",
                                                    m, ", chunks: ", chunks, " on --stages ", p));
  }
  fleet.schedule = std::move(*schedule);
  ASSIGN_OR_RETURN(auto plan, PlanStages(job, config, *cache, p, chunks, dtype, options.quiet));
  fleet.loss_scale = 1.0f / static_cast<float>(m);
  fleet.dropout_seed = DropoutBaseSeed(job.seed);
  std::unique_ptr<LocalWorkers> local;
  // A stop (SIGINT/SIGTERM, or the job service's) is honoured during start-up too: nothing to checkpoint yet.
  auto stop_requested = [&] { return StopRequested(options); };
  const absl::Status stopped_early = absl::CancelledError("stopped before the first step: nothing to checkpoint");
  if (stop_requested()) return stopped_early;
  ASSIGN_OR_RETURN(std::vector<std::string> addresses, StartWorkers(job, options, &local));
  if (stop_requested()) return stopped_early;
  RETURN_IF_ERROR(ConnectAndConfigure(job, options, plan, addresses, &fleet));
  if (stop_requested()) return stopped_early;

  AdamW optimizer(job.optimizer);
  ASSIGN_OR_RETURN(StartState start, LoadStartState(job, options, fleet, optimizer));
  std::map<std::string, at::Tensor>& master = start.master;
  RETURN_IF_ERROR(MakeDirs(options.output_dir));
  const std::string log_path = JoinPath(options.output_dir, "train_log.jsonl");
  if (start.resumed) RETURN_IF_ERROR(TrimTrainLog(log_path, start.step));
  ASSIGN_OR_RETURN(auto log, JsonlWriter::Open(log_path, /*append=*/start.resumed));

  auto checkpoint_now = [&](int64_t step) -> absl::Status {
    auto t0 = Clock::now();
    TrainingState state;
    state.step = step;
    state.lora = master;
    state.optimizer = optimizer.StateDict();
    state.job_hash = fleet.job_id;
    RETURN_IF_ERROR(WriteCheckpoint(options.output_dir, state));
    RETURN_IF_ERROR(SaveLoraOutputs(options.output_dir, master, job, step));
    const double seconds = SecondsSince(t0);
    if (!options.quiet) std::printf("checkpoint step-%lld written in %.2f s\n", static_cast<long long>(step), seconds);
    if (options.hooks.on_checkpoint) options.hooks.on_checkpoint(step, seconds);
    return absl::OkStatus();
  };
  // A step's inputs (micro-batches and shell outputs), computed off the critical path: step k+1's while the
  // stages run step k.
  auto prepare = [&](int64_t step, bool push) -> absl::StatusOr<StepInputs> {
    StepInputs in;
    ASSIGN_OR_RETURN(in.micro_batches, sampler.Step(step));
    in.constants.resize(m);
    in.rope_keys.resize(m);
    RETURN_IF_ERROR(TorchCall("computing the shell", [&] {
      at::NoGradGuard no_grad;
      for (int i = 0; i < m; ++i) {
        const MicroBatch& mb = in.micro_batches[i];
        in.constants[i] = shell(mb.timestep, mb.guidance, mb.img_ids, mb.txt_ids, dtype);
        in.rope_keys[i] = RopeKey(mb.grid_h, mb.grid_w, mb.encoder_hidden_states.size(1));
      }
    }));
    if (push) {  // while the previous step runs: the boundary then carries only the new adapters
      RETURN_IF_ERROR(fleet.PushData(step, in));
      in.data_pushed = true;
    }
    return in;
  };
  std::future<absl::StatusOr<StepInputs>> next_inputs;

  const bool tty = ::isatty(STDOUT_FILENO);
  CoordinatorResult result;
  result.first_step = start.step;
  double elapsed = 0;
  if (options.hooks.on_start) options.hooks.on_start({fleet.job_id, start.step, total_steps, addresses});
  for (int64_t step = start.step; step < total_steps; ++step) {
    auto t0 = Clock::now();
    absl::StatusOr<StepInputs> inputs = next_inputs.valid() ? next_inputs.get() : prepare(step, false);
    if (!inputs.ok()) return inputs.status();
    const double prepare_seconds = SecondsSince(t0);
    ASSIGN_OR_RETURN(StepOutputs outputs, fleet.RunStep(step, *inputs, master, [&] {
      if (step + 1 < total_steps && !stop_requested()) {
        next_inputs = std::async(std::launch::async, prepare, step + 1, true);
      }
    }));
    const auto t_run = Clock::now();
    ASSIGN_OR_RETURN(PipelineStepRecord rec, ApplyGradients(job, step, outputs, optimizer, master));
    rec.step_seconds = SecondsSince(t0);
    rec.prepare_seconds = prepare_seconds;
    rec.optimizer_seconds = SecondsSince(t_run);
    rec.samples_per_second = static_cast<double>(job.batch_size) / rec.step_seconds;
    RETURN_IF_ERROR(log->Append(StepLine(rec)));
    elapsed += rec.step_seconds;
    if (!options.quiet) PrintProgress(rec, start.step, total_steps, elapsed, tty);
    if (options.hooks.on_step) options.hooks.on_step(rec);
    result.steps.push_back(rec);
    const bool last = step + 1 == total_steps;
    const bool stop = stop_requested();
    if (last || stop || (job.checkpoint_every > 0 && (step + 1) % job.checkpoint_every == 0)) {
      if (tty && !options.quiet) std::printf("\n");
      RETURN_IF_ERROR(checkpoint_now(step + 1));
    }
    if (stop && !last) {
      LogWarning("stop requested: checkpointed step ", step + 1, " and stopping");
      break;
    }
  }
  if (tty && !options.quiet) std::printf("\n");
  if (local) {
    for (auto& c : fleet.clients) (void)c->Shutdown();
    RETURN_IF_ERROR(local->Stop());
  }
  return result;
}

}  // namespace baton
