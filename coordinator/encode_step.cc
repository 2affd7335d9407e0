#include "coordinator/encode_step.h"

#include <absl/base/thread_annotations.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/synchronization/mutex.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "coordinator/encoder_client.h"
#include "core/data/cache_merge.h"
#include "core/util/log.h"
#include "core/util/status.h"

namespace baton {
namespace {

// The workers' latest progress, summed into one line per update. Written by the workers' stream threads.
class ProgressBoard {
 public:
  ProgressBoard(size_t workers, bool quiet) : latest_(workers), quiet_(quiet) {}

  void Update(size_t worker, const v1::EncodeProgress& msg) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    latest_[worker] = msg;
    if (quiet_) return;
    int64_t done = 0, total = 0, encoded = 0, kept = 0, failed = 0;
    for (const v1::EncodeProgress& p : latest_) {
      done += p.done();
      total += p.total();
      encoded += p.encoded();
      kept += p.kept();
      failed += p.failed();
    }
    std::printf("encoding %lld/%lld on %zu encoder worker(s) (encoded %lld, kept %lld, failed %lld) %s\n",
                static_cast<long long>(done), static_cast<long long>(total), latest_.size(),
                static_cast<long long>(encoded), static_cast<long long>(kept), static_cast<long long>(failed),
                msg.current().c_str());
    std::fflush(stdout);
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::EncodeProgress> latest_ ABSL_GUARDED_BY(mu_);
  const bool quiet_;
};

v1::EncodeDatasetRequest RequestFor(const JobConfig& job, const std::string& cache_dir) {
  v1::EncodeDatasetRequest req;
  req.set_dataset_dir(job.encode.images);
  req.set_cache_dir(cache_dir);
  req.set_trigger(job.encode.trigger);
  req.set_control_dir(job.encode.control);
  for (int64_t f : job.encode.frames) req.add_frames(f);
  req.set_frame_extraction(job.encode.frame_extraction);
  req.set_clips_per_video(job.encode.clips_per_video);
  req.set_slide_stride(job.encode.slide_stride);
  req.set_resolution(job.encode.resolution);
  for (int64_t r : job.encode.resolutions) req.add_resolutions(r);
  req.set_quantize(job.encode.quantize);  // "" = the worker's own --quantize
  return req;
}

void Tally(const v1::EncodeProgress& last, const std::string& address, EncodeReport& report) {
  report.samples += last.total();
  report.encoded += last.encoded();
  report.kept += last.kept();
  report.failed += last.errors_size();
  for (const auto& e : last.errors()) LogWarning("encoder worker ", address, ": ", e);
}

// Every worker encodes its share into its shard cache, all at once; each runs to its end whatever the others do.
absl::Status EncodeShards(const JobConfig& job, const std::vector<std::string>& workers,
                          const std::vector<std::string>& shard_dirs, absl::Duration timeout, bool quiet,
                          EncodeReport& report) {
  const int64_t n = static_cast<int64_t>(workers.size());
  ProgressBoard board(workers.size(), quiet);
  std::vector<absl::StatusOr<v1::EncodeProgress>> results(workers.size(), absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int64_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      v1::EncodeDatasetRequest req = RequestFor(job, shard_dirs[static_cast<size_t>(i)]);
      req.set_shard_index(i);
      req.set_shard_count(n);
      results[static_cast<size_t>(i)] =
          CallEncodeDataset(workers[static_cast<size_t>(i)], req, timeout,
                            [&](const v1::EncodeProgress& msg) { board.Update(static_cast<size_t>(i), msg); });
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<std::string> failures;
  absl::StatusCode code = absl::StatusCode::kOk;
  for (int64_t i = 0; i < n; ++i) {
    const auto& result = results[static_cast<size_t>(i)];
    if (result.ok()) {
      Tally(*result, workers[static_cast<size_t>(i)], report);
      continue;
    }
    if (code == absl::StatusCode::kOk) code = result.status().code();
    failures.push_back(absl::StrCat("shard ", i, "/", n, ": ", result.status().message()));
  }
  if (failures.empty()) return absl::OkStatus();
  return absl::Status(code, absl::StrCat("encode: ", failures.size(), " of ", n, " encoder workers failed (",
                                         absl::StrJoin(failures, "; "), "); the records the workers wrote are kept ",
                                         "in ", job.dataset, ".shards/: rerun to encode only the missing ones"));
}

}  // namespace

std::string ShardCacheDir(const std::string& dataset, int64_t index, int64_t count) {
  std::string base(dataset);
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  return absl::StrCat(base, ".shards/", index, "-of-", count);
}

absl::StatusOr<EncodeReport> RunEncodeStep(const JobConfig& job, absl::Duration timeout, bool quiet) {
  const auto started = std::chrono::steady_clock::now();
  std::vector<std::string> workers = job.encode.encoder_workers;
  if (workers.empty() && !job.encode.encoder_worker.empty()) workers = {job.encode.encoder_worker};
  EncodeReport report;
  report.workers = static_cast<int64_t>(workers.size());
  if (workers.empty()) return report;
  const int64_t n = report.workers;
  std::vector<std::string> shard_dirs;
  if (n == 1) {
    ProgressBoard board(1, quiet);
    ASSIGN_OR_RETURN(v1::EncodeProgress last,
                     CallEncodeDataset(workers[0], RequestFor(job, job.dataset), timeout,
                                       [&](const v1::EncodeProgress& msg) { board.Update(0, msg); }));
    Tally(last, workers[0], report);
  } else {
    for (int64_t i = 0; i < n; ++i) shard_dirs.push_back(ShardCacheDir(job.dataset, i, n));
    RETURN_IF_ERROR(EncodeShards(job, workers, shard_dirs, timeout, quiet, report));
  }
  if (report.encoded + report.kept == 0) {
    return absl::FailedPreconditionError(absl::StrCat("encoder worker", n > 1 ? "s " : " ",
                                                      absl::StrJoin(workers, ", "), " produced no samples from ",
                                                      job.encode.images));
  }
  std::string merged;
  if (n > 1) {
    auto m = MergeShardCaches(shard_dirs, job.dataset);
    if (!m.ok()) {
      return Annotate(m.status(), absl::StrCat("encode: merging the ", n, " shard caches into ", job.dataset));
    }
    merged = absl::StrCat(" (merged from ", n, " shards: ", m->linked, " linked, ", m->copied, " copied, ",
                          m->unchanged, " unchanged, ", m->removed, " removed)");
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (!quiet) {
    std::printf("cache %s ready%s: %lld encoded, %lld unchanged, %lld failed in %.2f s\n", job.dataset.c_str(),
                merged.c_str(), static_cast<long long>(report.encoded), static_cast<long long>(report.kept),
                static_cast<long long>(report.failed), report.seconds);
  }
  return report;
}

}  // namespace baton
