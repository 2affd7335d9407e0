// The order of records over the job's datasets (core/train/data_order.h): repeats and weights counted over epochs,
// buckets never mixed, the same order however it is asked for, and caption dropout's draws; `datasets:` and
// `caption_dropout` as a job file gives them.
#include "core/train/data_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "core/data/cache.h"
#include "core/model/flux2_family.h"
#include "core/testing/paths.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/batches.h"
#include "core/train/job.h"
#include "core/util/files.h"

namespace baton {
namespace {

class DataOrderTest : public ::testing::Test {
 protected:
  // Two caches of the tiny model's widths: "a" with 4 records on one grid, "b" with 6 over two grids (3 + 3).
  static void SetUpTestSuite() {
    dir_ = new std::string(test_util::MakeTempDir("data_order"));
    const Flux2Config c = test_util::TinyFlux2Config();
    ASSERT_TRUE(WriteSyntheticCache(Path("a"), c.in_channels, c.joint_attention_dim, 4, {{2, 2}}, 5, 1).ok());
    ASSERT_TRUE(
        WriteSyntheticCache(Path("b"), c.in_channels, c.joint_attention_dim, 6, {{2, 2}, {2, 3}}, 5, 2, 3).ok());
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string Path(const std::string& name) { return JoinPath(*dir_, name); }

  static JobConfig Job(const std::string& datasets, int64_t batch = 1, const std::string& extra = "") {
    auto job =
        ParseJobYaml(absl::StrCat("model: m\ndatasets: ", datasets, "\nbatch_size: ", batch, "\nseed: 7\n", extra));
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : JobConfig{};
  }
  static std::unique_ptr<CacheReader> Open(const JobConfig& job) {
    auto cache = CacheReader::OpenAll(job.SourcePaths());
    EXPECT_TRUE(cache.ok()) << cache.status();
    return cache.ok() ? std::move(*cache) : nullptr;
  }
  // How often each record index is drawn over micro-batches [0, n).
  static std::map<int64_t, int> Count(const DataOrder& order, int64_t n) {
    std::map<int64_t, int> seen;
    for (int64_t g = 0; g < n; ++g) {
      for (int64_t r : order.MicroBatch(g)) ++seen[r];
    }
    return seen;
  }
  static bool OrderDrops(const CacheReader& cache, const JobConfig& job, int64_t step, int64_t record) {
    auto order = DataOrder::Create(cache, job, {});
    return order.ok() && (*order)->DropsCaption(step, record);
  }
  static std::string* dir_;
};
std::string* DataOrderTest::dir_ = nullptr;

TEST_F(DataOrderTest, RepeatsShowEachRecordThatManyTimesPerEpoch) {
  const JobConfig job = Job(absl::StrCat("[{path: ", Path("a"), ", repeats: 3}, ", Path("b"), "]"));
  auto cache = Open(job);
  auto order = DataOrder::Create(*cache, job, {});
  ASSERT_TRUE(order.ok()) << order.status();
  ASSERT_EQ((*order)->per_epoch(), 4 * 3 + 6);
  // Two epochs: records 0-3 (cache a) 3 times each per epoch, 4-9 (cache b) once.
  const auto seen = Count(**order, 2 * (*order)->per_epoch());
  ASSERT_EQ(seen.size(), 10u);
  for (const auto& [record, times] : seen) EXPECT_EQ(times, record < 4 ? 6 : 2) << "record " << record;
}

TEST_F(DataOrderTest, OneDatasetKeepsTheOrderOfDatasetAndNoMicroBatchMixesBuckets) {
  auto one = ParseJobYaml(absl::StrCat("model: m\ndataset: ", Path("b"), "\nbatch_size: 3\nseed: 7\n"));
  ASSERT_TRUE(one.ok());
  const JobConfig listed = Job(absl::StrCat("[", Path("b"), "]"), 3);
  auto cache = Open(listed);
  auto a = DataOrder::Create(*cache, *one, {}), b = DataOrder::Create(*cache, listed, {});
  ASSERT_TRUE(a.ok() && b.ok());
  for (int64_t g = 0; g < 20; ++g) {
    const std::vector<int64_t> records = (*a)->MicroBatch(g);
    EXPECT_EQ(records, (*b)->MicroBatch(g));
    std::set<std::string> buckets;
    for (int64_t r : records) buckets.insert(cache->index().records[r].BucketKey());
    EXPECT_EQ(buckets.size(), 1u) << "micro-batch " << g;
  }
}

TEST_F(DataOrderTest, WeightsShareTheMicroBatchesAndEachDatasetStillCyclesItsRecords) {
  const JobConfig job =
      Job(absl::StrCat("[{path: ", Path("a"), ", weight: 0.75}, {path: ", Path("b"), ", weight: 0.25}]"));
  auto cache = Open(job);
  auto order = DataOrder::Create(*cache, job, {});
  ASSERT_TRUE(order.ok()) << order.status();
  const int64_t n = 8000;
  const auto seen = Count(**order, n);
  int from_a = 0;
  for (const auto& [record, times] : seen) from_a += record < 4 ? times : 0;
  // Binomial(8000, 0.75): sd 38.7; 4 sd.
  EXPECT_NEAR(from_a, 0.75 * n, 155) << "micro-batches from dataset a";
  // Within a dataset, epoch after epoch: every record within one epoch's worth of the others.
  for (const auto& [record, times] : seen) {
    const int mean = record < 4 ? from_a / 4 : (n - from_a) / 6;
    EXPECT_LE(std::abs(times - mean), 1) << "record " << record;
  }
  // Asked out of order, or by another object, the order is the same (a resumed run asks from its step on).
  auto again = DataOrder::Create(*cache, job, {});
  ASSERT_TRUE(again.ok());
  for (int64_t g : {7999, 4096, 4095, 0, 12345}) EXPECT_EQ((*again)->MicroBatch(g), (*order)->MicroBatch(g)) << g;
}

TEST_F(DataOrderTest, ADatasetWithoutOneMicroBatchIsNamed) {
  // Cache a's 4 records in one bucket hold no micro-batch of 5.
  const JobConfig job =
      Job(absl::StrCat("[{path: ", Path("a"), ", weight: 0.5}, {path: ", Path("b"), ", weight: 0.5}]"), 5);
  auto cache = Open(job);
  auto order = DataOrder::Create(*cache, job, {});
  ASSERT_FALSE(order.ok());
  EXPECT_NE(order.status().message().find(absl::StrCat("dataset ", Path("a"))), std::string::npos) << order.status();
}

TEST_F(DataOrderTest, CaptionDropoutDrawsDependOnSeedStepAndRecordOnly) {
  const JobConfig job =
      Job(absl::StrCat("[{path: ", Path("a"), ", caption_dropout: 1}, ", Path("b"), "]"), 1, "caption_dropout: 0.3\n");
  auto cache = Open(job);
  auto order = DataOrder::Create(*cache, job, {});
  ASSERT_TRUE(order.ok());
  auto same = DataOrder::Create(*cache, job, {});
  int dropped = 0, draws = 0;
  for (int64_t step = 0; step < 2000; ++step) {
    for (int64_t r = 0; r < 10; ++r) {
      const bool drops = (*order)->DropsCaption(step, r);
      EXPECT_EQ(drops, (*same)->DropsCaption(step, r));
      if (r < 4) {
        EXPECT_TRUE(drops) << "dataset a drops every caption";
      } else {
        dropped += drops ? 1 : 0;
        ++draws;
      }
    }
  }
  // Binomial(12000, 0.3): sd 50; 4 sd.
  EXPECT_NEAR(dropped, 0.3 * draws, 200);
  JobConfig none = job;
  none.caption_dropout = 0;
  none.datasets[0].caption_dropout = 0;
  auto never = DataOrder::Create(*cache, none, {});
  for (int64_t step = 0; step < 100; ++step) {
    for (int64_t r = 0; r < 10; ++r) EXPECT_FALSE((*never)->DropsCaption(step, r));
  }
}

TEST_F(DataOrderTest, ADroppedCaptionTrainsOnTheCachesEmptyCaption) {
  const JobConfig job =
      Job(absl::StrCat("[", Path("a"), ", ", Path("b"), "]"), 2, "caption_dropout: 0.5\nmicro_batches: 2\n");
  auto cache = Open(job);
  Flux2Family family(test_util::TinyFlux2Config(), nullptr);
  auto sampler = StepSampler::Create(cache.get(), job, &family);
  ASSERT_TRUE(sampler.ok()) << sampler.status();
  const at::Tensor empty_a = *cache->EmptyPrompt(0), empty_b = *cache->EmptyPrompt(1);
  EXPECT_FALSE(at::equal(empty_a, empty_b));  // each cache's own
  int dropped = 0, kept = 0;
  for (int64_t step = 0; step < 10; ++step) {
    auto batches = sampler->Step(step);
    ASSERT_TRUE(batches.ok()) << batches.status();
    for (const MicroBatch& mb : *batches) {
      const at::Tensor text = mb.model_inputs.at("encoder_hidden_states");
      for (size_t j = 0; j < mb.samples.size(); ++j) {
        const int64_t r = mb.samples[j];
        const bool drops = std::count(mb.dropped_captions.begin(), mb.dropped_captions.end(), r) > 0;
        EXPECT_EQ(drops, OrderDrops(*cache, job, step, r));
        const at::Tensor want = drops ? (cache->source(r) == 0 ? empty_a : empty_b) : cache->Load(r)->prompt_embeds;
        EXPECT_TRUE(at::equal(text[static_cast<int64_t>(j)], want)) << "step " << step << " record " << r;
        (drops ? dropped : kept) += 1;
      }
    }
  }
  EXPECT_GT(dropped, 0);
  EXPECT_GT(kept, 0);
}

TEST_F(DataOrderTest, DroppingCaptionsFromACacheWithoutTheEmptyCaptionSaysHowToFixIt) {
  const std::string old = Path("old");
  std::filesystem::copy(Path("a"), old, std::filesystem::copy_options::recursive);
  auto index = ReadCacheIndex(old);
  ASSERT_TRUE(index.ok());
  index->empty_prompt = {};
  ASSERT_TRUE(WriteCacheIndex(old, *index).ok());
  auto job = ParseJobYaml(absl::StrCat("model: m\ndataset: ", old, "\ncaption_dropout: 0.1\n"));
  ASSERT_TRUE(job.ok());
  auto cache = CacheReader::Open(old);
  Flux2Family family(test_util::TinyFlux2Config(), nullptr);
  auto sampler = StepSampler::Create(cache->get(), *job, &family);
  ASSERT_FALSE(sampler.ok());
  EXPECT_NE(sampler.status().message().find("rerun encoder_worker"), std::string::npos) << sampler.status();
  job->caption_dropout = 0;  // without dropout it trains as always
  EXPECT_TRUE(StepSampler::Create(cache->get(), *job, &family).ok());
}

TEST(DatasetsJobTest, DatasetsAndCaptionDropoutParse) {
  auto job = ParseJobYaml(
      "model: m\ndatasets:\n  - cache/a\n  - {path: cache/b, repeats: 3, caption_dropout: 0.2}\ncaption_dropout: "
      "0.05\n");
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(job->datasets.size(), 2u);
  EXPECT_TRUE(job->dataset.empty());
  EXPECT_EQ(job->SourcePaths(), (std::vector<std::string>{"cache/a", "cache/b"}));
  EXPECT_EQ(job->datasets[1].repeats, 3);
  EXPECT_DOUBLE_EQ(job->CaptionDropout(job->datasets[0]), 0.05);
  EXPECT_DOUBLE_EQ(job->CaptionDropout(job->datasets[1]), 0.2);
  auto one = ParseJobYaml("model: m\ndataset: d\n");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->SourcePaths(), (std::vector<std::string>{"d"}));
  // FLUX.2 reference images: the control folder the encoder worker reads, and the sample references.
  auto edit = ParseJobYaml(
      "model: m\ndataset: d\nencode: {images: data, encoder_worker: 'h:1', control: data/control}\n"
      "samples: {every: 1, prompts: [a], references: [r0.png, r1.png]}\n");
  ASSERT_TRUE(edit.ok()) << edit.status();
  EXPECT_EQ(edit->encode.control, "data/control");
  EXPECT_EQ(edit->encode.frame_extraction, "head");
  auto clips = ParseJobYaml(
      "model: m\ndataset: d\nencode: {images: v, encoder_worker: 'h:1', frames: [81, 1, 33], frame_extraction: slide, "
      "clips_per_video: 4, slide_stride: 8}\n");
  ASSERT_TRUE(clips.ok()) << clips.status();
  EXPECT_EQ(clips->encode.frames, (std::vector<int64_t>{1, 33, 81}));
  EXPECT_EQ(clips->encode.frame_extraction, "slide");
  EXPECT_EQ(clips->encode.clips_per_video, 4);
  EXPECT_EQ(clips->encode.slide_stride, 8);
  EXPECT_EQ(edit->samples.references, (std::vector<std::string>{"r0.png", "r1.png"}));
}

TEST(DatasetsJobTest, BadDatasetsAreRefusedWithFileAndLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"model: m\ndatasets: [{path: a, repeats: -1}]\n", "job.yaml:2: 'repeats' must be in [1, 10000]"},
      {"model: m\ndatasets: [{path: a, weight: 1.5}]\n", "job.yaml:2: 'weight' must be in (0, 1]"},
      {"model: m\ndatasets: [{path: a, weight: -0.5}]\n", "job.yaml:2: 'weight' must be in (0, 1]"},
      {"model: m\ndatasets:\n  - {path: a, caption_dropout: 1.2}\n", "job.yaml:3: 'caption_dropout' must be in [0, 1]"},
      {"model: m\ndataset: d\ncaption_dropout: -0.1\n", "job.yaml:3: 'caption_dropout' must be in [0, 1]"},
      {"model: m\ndatasets: [{path: a, weight: 0.5}, b]\n", "every entry a weight, or none"},
      {"model: m\ndatasets: [{path: a, weight: 0.5, repeats: 2}]\n", "'weight' and repeats are exclusive"},
      {"model: m\ndataset: d\ndatasets: [a]\n", "job.yaml:3: 'datasets' and dataset are exclusive"},
      {"model: m\ndatasets: [a, a]\n", "dataset a is listed twice"},
      {"model: m\ndatasets: [cache/a, ./cache/a/]\n", "dataset ./cache/a/ is listed twice"},
      {"model: m\ndatasets: [{repeats: 2}]\n", "'path' is required"},
      {"model: m\ndatasets: [{path: a, shuffle: true}]\n", "unknown key 'shuffle' in a datasets entry"},
      {"model: m\ndatasets: []\n", "'datasets' must list 1 to 64"},
      {"model: m\n", "'dataset' is required"},
      {"model: m\ndatasets: [a]\nencode: {images: i, encoder_worker: 'h:1'}\n", "with `datasets:`, encode each folder"},
      {"model: m\ndatasets: [a, b]\nsweep: {dataset: [a, b]}\n", "a job with `datasets:` cannot sweep it"},
      // encode's Wan clip keys (the encoder worker's --frames, --frame_extraction, --clips_per_video).
      {"model: m\ndataset: d\nencode:\n  {images: i, encoder_worker: 'h:1', frames: [1, 6]}\n",
       "job.yaml:4: 'frames' must be frame counts 4k + 1 in [1, 1021], each once"},
      {"model: m\ndataset: d\nencode: {images: i, encoder_worker: 'h:1', frame_extraction: full}\n",
       "job.yaml:3: 'frame_extraction' must be head, chunk, slide or uniform"},
      {"model: m\ndataset: d\nencode: {images: i, encoder_worker: 'h:1', frame_extraction: uniform}\n",
       "'clips_per_video' must be in [1, 10000] with uniform"},
      {"model: m\ndataset: d\nsamples: {every: 1, prompts: [a], references: ['']}\n",
       "job.yaml:3: 'references' must name image files"},
      {"model: m\ndataset: d\nloss: {weighting: snr}\n", "job.yaml:3: 'weighting' must be none, sigma_sqrt or cosmap"},
  };
  for (const auto& [yaml, want] : cases) {
    auto job = ParseJobYaml(yaml, "job.yaml");
    ASSERT_FALSE(job.ok()) << yaml;
    EXPECT_NE(job.status().message().find(want), std::string::npos) << yaml << "\n" << job.status();
  }
}

TEST_F(DataOrderTest, CachesOfAnotherEncoderDoNotReadAsOne) {
  const std::string other = Path("other");
  ASSERT_TRUE(WriteSyntheticCache(other, 8, 16, 2, {{2, 2}}, 5, 1).ok());
  auto both = CacheReader::OpenAll({Path("a"), other});
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("different encoders"), std::string::npos) << both.status();
}

}  // namespace
}  // namespace baton
