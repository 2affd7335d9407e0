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
#include "coordinator/encoder_client.h"
#include "coordinator/local_workers.h"
#include "coordinator/stage_client.h"
#include "core/data/cache.h"
#include "core/lora/lora.h"
#include "core/model/flux2_weights.h"
#include "core/pipeline/partition.h"
#include "core/pipeline/schedule.h"
#include "core/pipeline/stage_io.h"
#include "core/train/adamw.h"
#include "core/train/batches.h"
#include "core/train/common.h"
#include "core/train/init_lora.h"
#include "core/util/files.h"
#include "core/util/log.h"
#include "core/util/status.h"
#include "core/util/threads.h"

namespace baton {
namespace {

std::atomic<bool> g_stop_requested{false};
using Clock = std::chrono::steady_clock;

// Runs fn(i) for i in [0, n) on n threads; returns the first error (by index).
absl::Status ParallelFor(int n, const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> results(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) threads.emplace_back([&, i] { results[i] = fn(i); });
  for (auto& t : threads) t.join();
  for (const auto& s : results) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// What the coordinator knows each stage holds in its RoPE cache (mirrors the stage's FIFO).
class RopeMirror {
 public:
  bool Has(const std::string& key) const { return keys_.count(key) > 0; }
  void Add(const std::string& key) {
    keys_.insert(key);
    order_.push_back(key);
    while (order_.size() > kRopeCacheEntries) {
      keys_.erase(order_.front());
      order_.pop_front();
    }
  }

 private:
  std::set<std::string> keys_;
  std::deque<std::string> order_;
};

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
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) break;  // a torn last line is dropped
    std::string line = text.substr(start, end - start);
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("step") && j["step"].get<int64_t>() <= last_step) kept += line + "\n";
    start = end + 1;
  }
  return WriteFileAtomic(path, kept);
}

}  // namespace

void RequestCoordinatorStop() { g_stop_requested = true; }

absl::StatusOr<CoordinatorResult> RunCoordinator(const JobConfig& job, const CoordinatorOptions& options) {
  const int p = options.stages;
  if (p < 1) return absl::InvalidArgumentError("--stages must be ≥ 1");
  if (!options.workers.empty() && static_cast<int>(options.workers.size()) != p) {
    return absl::InvalidArgumentError(
        absl::StrCat("--workers lists ", options.workers.size(), " addresses for ", p, " stages"));
  }
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

  // Plan the split by cost.
  PartitionOptions popts;
  popts.stages = p;
  popts.bytes_per_param = static_cast<int>(c10::elementSize(dtype));
  popts.lora_rank = job.lora.rank;
  popts.micro_batches = m;
  popts.recompute = job.recompute;
  popts.all_linear = job.lora_targets == "all-linear";
  // Size the plan for the cache's largest micro-batch (memory) and its token mix (compute).
  int64_t max_img = 0, max_txt = 0;
  for (const CacheRecordInfo& r : cache->index().records) {
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
  ASSIGN_OR_RETURN(Plan plan, PartitionFlux2(config, popts));
  if (!options.quiet) std::printf("%s", RenderPlan(config, plan).c_str());
  if (!plan.fits) return absl::ResourceExhaustedError(absl::StrCat("the model does not fit: ", plan.message));
  ASSIGN_OR_RETURN(ScheduleKind kind, ParseScheduleKind(job.schedule));
  ASSIGN_OR_RETURN(Schedule schedule, MakeSchedule(kind, p, m));

  // Workers: embedded local processes, or the ones given.
  std::unique_ptr<LocalWorkers> local;
  std::vector<std::string> addresses = options.workers;
  if (addresses.empty()) {
    LocalWorkerOptions lopts;
    if (!options.stage_worker_binary.empty()) lopts.binary = options.stage_worker_binary;
    lopts.threads = job.threads;
    int wait_s = options.worker_wait_timeout_s > 0 ? options.worker_wait_timeout_s
                                                   : static_cast<int>(absl::ToInt64Seconds(options.rpc_timeout));
    lopts.extra_args = {absl::StrCat("--wait_timeout_s=", wait_s)};
    ASSIGN_OR_RETURN(local, LocalWorkers::Start(p, lopts));
    addresses = local->addresses();
    if (!options.quiet) std::printf("started %d local stage workers: %s\n", p, absl::StrJoin(addresses, ", ").c_str());
  }
  std::vector<std::unique_ptr<StageClient>> clients;
  for (int i = 0; i < p; ++i) clients.push_back(std::make_unique<StageClient>(i, addresses[i], options.rpc_timeout));
  RETURN_IF_ERROR(ParallelFor(p, [&](int i) { return clients[i]->WaitReady(options.connect_timeout); }));

  // Configure every stage with its slice.
  const std::string job_id = JobHash(job);
  std::vector<std::vector<std::string>> stage_params(p);
  RETURN_IF_ERROR(ParallelFor(p, [&](int i) -> absl::Status {
    const StageSpec& spec = plan.stages[i];
    v1::ConfigureRequest req;
    req.set_job_id(job_id);
    req.set_config_hash(job_id);
    req.set_stage_index(i);
    req.set_num_stages(p);
    req.set_model_path(job.model);
    req.set_model_config_path(job.model_config);
    req.set_block_begin(static_cast<int32_t>(spec.block_begin));
    req.set_block_end(static_cast<int32_t>(spec.block_end));
    req.set_has_embedders(spec.has_embedders);
    req.set_has_head(spec.has_head);
    req.set_dtype(job.dtype);
    req.set_device(i < static_cast<int>(job.devices.size()) ? job.devices[i] : "cpu");
    req.set_recompute(job.recompute);
    req.mutable_lora()->set_rank(static_cast<int32_t>(job.lora.rank));
    req.mutable_lora()->set_alpha(static_cast<float>(job.lora.alpha));
    for (const auto& t : job.lora.targets) req.mutable_lora()->add_targets(t);
    req.mutable_lora()->set_dropout(static_cast<float>(job.lora.dropout));
    if (i + 1 < p) req.set_next_address(addresses[i + 1]);
    if (i > 0) req.set_prev_address(addresses[i - 1]);
    req.set_threads(job.threads);
    req.set_seed(job.seed);
    ASSIGN_OR_RETURN(v1::ConfigureResponse resp, clients[i]->Configure(req));
    stage_params[i].assign(resp.lora_param_names().begin(), resp.lora_param_names().end());
    return absl::OkStatus();
  }));

  // Master weights: from the newest checkpoint when resuming, else the stages' own (seeded) init.
  std::map<std::string, at::Tensor> master;
  AdamW optimizer(job.optimizer);
  int64_t start_step = 0;
  std::optional<TrainingState> resumed;
  if (options.resume) {
    auto state = LoadLatestCheckpoint(options.output_dir);
    if (state.ok()) {
      if (state->job_hash != job_id) {
        return absl::FailedPreconditionError(absl::StrCat(
            "checkpoint in ", options.output_dir, " is from another job (", state->job_hash, " vs ", job_id, ")"));
      }
      resumed = std::move(*state);
    } else if (state.status().code() != absl::StatusCode::kNotFound) {
      return state.status();
    } else if (!options.quiet) {
      std::printf("--resume: no checkpoint in %s, starting fresh\n", options.output_dir.c_str());
    }
  }
  if (resumed) {
    master = resumed->lora;
    RETURN_IF_ERROR(optimizer.LoadStateDict(resumed->optimizer));
    start_step = resumed->step;
    if (!options.quiet) std::printf("resuming from step %lld\n", static_cast<long long>(start_step));
  } else {
    for (int i = 0; i < p; ++i) {
      ASSIGN_OR_RETURN(TensorMap w, clients[i]->GetLora(job_id));
      for (auto& [name, t] : w) master[name] = t;
    }
    if (!job.init_lora.empty()) {
      ASSIGN_OR_RETURN(master, LoadInitLora(job.init_lora, job.lora, master));
    }
  }
  for (int i = 0; i < p; ++i) {
    for (const auto& name : stage_params[i]) {
      if (!master.count(name)) return absl::FailedPreconditionError(absl::StrCat("no master weight for ", name));
    }
  }
  if (master.empty()) return absl::InvalidArgumentError("no Linear matched the LoRA targets");

  RETURN_IF_ERROR(MakeDirs(options.output_dir));
  const std::string log_path = JoinPath(options.output_dir, "train_log.jsonl");
  if (resumed) {
    RETURN_IF_ERROR(TrimTrainLog(log_path, start_step));
  }
  ASSIGN_OR_RETURN(auto log, JsonlWriter::Open(log_path, /*append=*/resumed.has_value()));

  std::vector<RopeMirror> rope(p);
  const float loss_scale = 1.0f / static_cast<float>(m);
  const uint64_t dropout_base = DropoutBaseSeed(job.seed);
  const bool tty = ::isatty(STDOUT_FILENO);
  CoordinatorResult result;
  result.first_step = start_step;
  double elapsed = 0;
  g_stop_requested = false;

  auto checkpoint_now = [&](int64_t step) -> absl::Status {
    auto t0 = Clock::now();
    TrainingState state;
    state.step = step;
    state.lora = master;
    state.optimizer = optimizer.StateDict();
    state.job_hash = job_id;
    RETURN_IF_ERROR(WriteCheckpoint(options.output_dir, state));
    RETURN_IF_ERROR(SaveLoraOutputs(options.output_dir, master, job, step));
    if (!options.quiet) {
      std::printf("checkpoint step-%lld written in %.2f s\n", static_cast<long long>(step),
                  std::chrono::duration<double>(Clock::now() - t0).count());
    }
    return absl::OkStatus();
  };

  // A step's inputs: its micro-batches and their shell outputs (modulations, RoPE), computed off the
  // critical path: step k+1's while the stages run step k.
  struct Prepared {
    std::vector<MicroBatch> mbs;
    std::vector<Flux2Constants> constants;
    std::vector<std::string> rope_keys;
  };
  auto prepare = [&](int64_t step) -> absl::StatusOr<Prepared> {
    Prepared out;
    ASSIGN_OR_RETURN(out.mbs, sampler.Step(step));
    out.constants.resize(m);
    out.rope_keys.resize(m);
    RETURN_IF_ERROR(TorchCall("computing the shell", [&] {
      at::NoGradGuard no_grad;
      for (int i = 0; i < m; ++i) {
        const MicroBatch& mb = out.mbs[i];
        out.constants[i] = shell(mb.timestep, mb.guidance, mb.img_ids, mb.txt_ids, dtype);
        out.rope_keys[i] = RopeKey(mb.grid_h, mb.grid_w, mb.encoder_hidden_states.size(1));
      }
    }));
    return out;
  };
  std::future<absl::StatusOr<Prepared>> next_prepared;

  for (int64_t step = start_step; step < total_steps; ++step) {
    auto t0 = Clock::now();
    absl::StatusOr<Prepared> prepared = next_prepared.valid() ? next_prepared.get() : prepare(step);
    if (!prepared.ok()) return prepared.status();
    const std::vector<MicroBatch>& mbs = prepared->mbs;
    const std::vector<Flux2Constants>& constants = prepared->constants;
    const std::vector<std::string>& rope_keys = prepared->rope_keys;
    auto header = [&](int mb, v1::EnvelopeHeader::Kind k) {
      v1::EnvelopeHeader h;
      h.set_job_id(job_id);
      h.set_step(step);
      h.set_micro_batch(mb);
      h.set_kind(k);
      h.set_sender("coordinator");
      return h;
    };
    const auto t_prepared = Clock::now();
    // Feed (weights first, then each micro-batch's data) and run, all stages at once.
    std::vector<TensorMap> grads(p);
    std::vector<v1::StepSummary> summaries(p);
    std::vector<absl::Status> feed_status(p), run_status(p);
    std::vector<std::thread> threads;
    std::atomic<bool> failed{false};
    auto fail_all = [&] {
      if (!failed.exchange(true)) {
        for (auto& c : clients) c->Cancel();
      }
    };
    for (int i = 0; i < p; ++i) {
      threads.emplace_back([&, i] {
        auto feed = [&]() -> absl::Status {
          TensorMap weights;
          for (const auto& name : stage_params[i]) weights[name] = master.at(name);
          RETURN_IF_ERROR(clients[i]->Push(header(0, v1::EnvelopeHeader::LORA_WEIGHTS), weights));
          for (int mb = 0; mb < m; ++mb) {
            if (!rope[i].Has(rope_keys[mb])) {
              RETURN_IF_ERROR(
                  clients[i]->Push(header(mb, v1::EnvelopeHeader::ROPE), RopeTensors(constants[mb], rope_keys[mb])));
              rope[i].Add(rope_keys[mb]);
            }
            RETURN_IF_ERROR(clients[i]->Push(header(mb, v1::EnvelopeHeader::CONSTANTS),
                                             ConstantTensors(constants[mb], rope_keys[mb])));
            if (i == 0) {
              RETURN_IF_ERROR(clients[i]->Push(header(mb, v1::EnvelopeHeader::INPUTS),
                                               InputTensors(mbs[mb].hidden_states, mbs[mb].encoder_hidden_states)));
            }
            if (i == p - 1) {
              RETURN_IF_ERROR(clients[i]->Push(header(mb, v1::EnvelopeHeader::TARGET), {{"target", mbs[mb].target}}));
            }
          }
          return absl::OkStatus();
        };
        feed_status[i] = feed();
        if (!feed_status[i].ok()) fail_all();
      });
      threads.emplace_back([&, i] {
        v1::StepPlan plan;
        plan.set_job_id(job_id);
        plan.set_step(step);
        plan.set_micro_batches(m);
        plan.set_loss_scale(loss_scale);
        plan.set_dropout_seed(dropout_base);
        for (const Action& a : schedule.per_stage[i]) {
          v1::Action* action = plan.add_actions();
          action->set_type(a.type == Action::kForward ? v1::Action::FORWARD : v1::Action::BACKWARD);
          action->set_micro_batch(a.micro_batch);
        }
        auto summary = clients[i]->RunStep(plan, &grads[i]);
        if (summary.ok()) {
          summaries[i] = std::move(*summary);
        } else {
          run_status[i] = summary.status();
          fail_all();
        }
      });
    }
    if (step + 1 < total_steps && !g_stop_requested.load()) {
      next_prepared = std::async(std::launch::async, prepare, step + 1);
    }
    for (auto& t : threads) t.join();
    if (failed) {
      // Report the root cause: a stage's own failure beats the cancellations it caused elsewhere.
      absl::Status first;
      for (int i = 0; i < p; ++i) {
        for (const absl::Status& s : {run_status[i], feed_status[i]}) {
          if (s.ok()) continue;
          if (first.ok() ||
              (first.code() == absl::StatusCode::kCancelled && s.code() != absl::StatusCode::kCancelled)) {
            first = s;
          }
        }
      }
      return absl::Status(first.code(), absl::StrCat("step ", step + 1, " failed: ", first.message()));
    }

    // Optimizer step on the fp32 masters.
    const auto t_run = Clock::now();
    std::map<std::string, at::Tensor> all_grads;
    for (int i = 0; i < p; ++i) {
      for (auto& [name, g] : grads[i]) all_grads[name] = g;
    }
    for (const auto& [name, w] : master) {
      if (!all_grads.count(name)) return absl::DataLossError(absl::StrCat("no gradient came back for ", name));
    }
    PipelineStepRecord rec;
    rec.step = step + 1;
    rec.lr = LearningRate(job.optimizer, step);
    rec.grad_norm = ClipGradNorm(all_grads, job.optimizer.clip);
    RETURN_IF_ERROR(optimizer.Step(master, all_grads, rec.lr));
    double loss_sum = 0;
    for (float l : summaries[p - 1].losses()) loss_sum += l;
    rec.loss = loss_sum / m;
    rec.step_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    rec.prepare_seconds = std::chrono::duration<double>(t_prepared - t0).count();
    rec.optimizer_seconds = std::chrono::duration<double>(Clock::now() - t_run).count();
    rec.samples_per_second = static_cast<double>(job.batch_size) / rec.step_seconds;
    nlohmann::ordered_json line = StepRecordJson(rec);
    nlohmann::ordered_json busy = nlohmann::ordered_json::array(), idle = nlohmann::ordered_json::array();
    for (int i = 0; i < p; ++i) {
      StageStepStats st{summaries[i].forward_seconds(), summaries[i].backward_seconds(), summaries[i].idle_seconds()};
      rec.stages.push_back(st);
      busy.push_back(st.forward_seconds + st.backward_seconds);
      idle.push_back(st.idle_seconds);
    }
    line["stage_busy_seconds"] = busy;
    line["stage_idle_seconds"] = idle;
    line["coordinator_seconds"] = {{"prepare", rec.prepare_seconds}, {"optimizer", rec.optimizer_seconds}};
    RETURN_IF_ERROR(log->Append(line));
    elapsed += rec.step_seconds;
    if (!options.quiet) {
      const int64_t done = step + 1 - start_step, left = total_steps - step - 1;
      double eta = elapsed / static_cast<double>(done) * static_cast<double>(left);
      std::string busy_text;
      for (int i = 0; i < p; ++i) {
        absl::StrAppend(&busy_text, i ? " " : "", absl::StrFormat("%.2f", busy[i].get<double>()));
      }
      std::printf("%sstep %4lld/%lld  loss %.5f  lr %.2e  %.3f s/step  %.1f samples/s  busy[s] %s  ETA %.0fs%s",
                  tty ? "\r\033[K" : "", static_cast<long long>(rec.step), static_cast<long long>(total_steps),
                  rec.loss, rec.lr, rec.step_seconds, rec.samples_per_second, busy_text.c_str(), eta,
                  tty ? (" " + ProgressBar(rec.step, total_steps, 20)).c_str() : "\n");
      std::fflush(stdout);
    }
    result.steps.push_back(rec);
    const bool last = step + 1 == total_steps;
    const bool stop = g_stop_requested.load();
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
    for (auto& c : clients) (void)c->Shutdown();
    RETURN_IF_ERROR(local->Stop());
  }
  return result;
}

}  // namespace baton
