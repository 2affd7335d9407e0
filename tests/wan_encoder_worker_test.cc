// The encoder worker on Wan: a tiny but complete Wan pipeline folder (WriteTinyWanPipeline) and the bundled clips
// of data/wan_sample/ (plus a folder of frames) through the real encoder_worker binary: video records of the right
// shapes and buckets, the same numbers as a direct WanSampleEncoder call, and reruns that re-encode only what changed.
#include <absl/strings/ascii.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "core/data/cache.h"
#include "core/encode/wan_encoder.h"
#include "core/image/image.h"
#include "core/testing/paths.h"
#include "core/testing/run_command.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"
#include "core/video/video_bucket.h"
#include "encoder_worker/encoder_service.h"
#include "tests/local_encoder_server.h"
#include "tests/local_stages.h"

namespace baton {
namespace {

// 5 frames of 48x32: a bright bar moving right.
void WriteFrameFolder(const std::string& dir) {
  ASSERT_TRUE(MakeDirs(dir).ok());
  for (int f = 0; f < 5; ++f) {
    Image img;
    img.width = 48;
    img.height = 32;
    img.pixels.assign(48 * 32 * 3, 40);
    for (int y = 0; y < 32; ++y) {
      for (int x = 8 * f; x < 8 * f + 6; ++x) img.pixels[(y * 48 + x) * 3 + 1] = 220;
    }
    ASSERT_TRUE(WritePng(JoinPath(dir, absl::StrCat("f", f, ".png")), img).ok());
  }
}

std::string Worker(const std::string& data, const std::string& cache, const std::string& pipeline) {
  return absl::StrCat(JoinPath(test_util::BinDir(), "encoder_worker"), " --dataset ", data, " --cache ", cache,
                      " --model ", pipeline, " --resolution 64 --max_frames 9 --max_sequence_length 32 --threads 1");
}

TEST(WanEncoderWorkerTest, BuildsVideoCacheMatchingDirectEncodeAndKeepsUnchanged) {
  const std::string root = test_util::MakeTempDir("wan_encoder");
  const std::string pipeline = JoinPath(root, "pipeline");
  ASSERT_TRUE(WriteTinyWanPipeline(pipeline, 0).ok());
  ASSERT_TRUE(IsWanPipelineFolder(pipeline));
  const std::string data = JoinPath(root, "data");
  std::filesystem::copy(JoinPath(test_util::SourceDir(), "data/wan_sample"), data);
  WriteFrameFolder(JoinPath(data, "bar_frames"));
  ASSERT_TRUE(WriteFileAtomic(JoinPath(data, "bar_frames.txt"), "a green bar moving right").ok());
  const std::string cache = JoinPath(root, "cache");
  // Masked loss: a mask beside a clip, the left half white, weights every frame's tokens alike.
  Image mask(64, 64);
  for (int y = 0; y < 64; ++y) {
    for (int x = 0; x < 32; ++x) mask.at(x, y)[0] = mask.at(x, y)[1] = mask.at(x, y)[2] = 255;
  }
  ASSERT_TRUE(WritePng(JoinPath(data, "red_circle_right.mask.png"), mask).ok());

  auto first = test_util::RunCommand(Worker(data, cache, pipeline));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("encoded 4, kept 0 unchanged, 0 failed of 4 samples"), std::string::npos) << first.output;
  auto reader = CacheReader::Open(cache);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_EQ((*reader)->size(), 4u);
  EXPECT_EQ((*reader)->index().latent_channels, 4);  // the tiny VAE's z_dim
  EXPECT_EQ((*reader)->index().text_dim, 32);        // the tiny umT5's d_model
  // Sorted by name: bar_frames (5 frames of 48x32 → 2 latent frames of 4x6), then the 17-frame 64x64 clips cut
  // to 9 frames → 3 latent frames of 8x8.
  const CacheRecordInfo& bar = (*reader)->index().records[0];
  EXPECT_EQ(bar.id, "bar_frames");
  EXPECT_EQ(bar.bucket, "48x32x5");
  EXPECT_EQ(bar.BucketKey(), "2x4x6/32");
  const CacheRecordInfo& red = (*reader)->index().records[1];
  EXPECT_EQ(red.id, "red_circle_right.mp4");
  EXPECT_EQ(red.bucket, "64x64x9");
  EXPECT_EQ(red.BucketKey(), "3x8x8/32");
  auto masked = (*reader)->Load(1);
  ASSERT_TRUE(masked.ok()) << masked.status();
  ASSERT_TRUE(masked->loss_mask.defined());
  EXPECT_TRUE(at::equal(masked->loss_mask, at::cat({at::ones({8, 4}), at::zeros({8, 4})}, 1))) << masked->loss_mask;
  EXPECT_FALSE((*reader)->Load(0)->loss_mask.defined());

  WanEncoderOptions options;
  options.max_sequence_length = 32;
  auto encoder = WanSampleEncoder::Open(pipeline, options);
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  // The tiny tokenizer's ids for a sample caption, as Hugging Face tokenizers gives them for the same
  // tokenizer.json (checked by hand with the venv's tokenizers 0.x): whole words, then </s>.
  EXPECT_EQ((*encoder)->tokenizer().Encode("a red circle moving right on a blue background", true),
            (std::vector<int64_t>{4, 25, 34, 18, 46, 8, 4, 27, 44, 1}));
  VideoBucketSpec spec;
  spec.max_frames = 9;
  spec.target_area = 64 * 64;
  for (size_t i : {size_t{0}, size_t{1}}) {
    const CacheRecordInfo& info = (*reader)->index().records[i];
    auto record = (*reader)->Load(i);
    ASSERT_TRUE(record.ok()) << record.status();
    auto pixels = LoadClipPixels(JoinPath(data, info.id), spec);
    ASSERT_TRUE(pixels.ok()) << pixels.status();
    auto latents = (*encoder)->EncodeVideo(*pixels);
    ASSERT_TRUE(latents.ok()) << latents.status();
    EXPECT_EQ(record->latents.sizes(), latents->sizes());
    EXPECT_TRUE(at::allclose(record->latents, *latents, 1e-4, 1e-5)) << info.id;
    const std::string stem = info.id == "bar_frames" ? info.id : info.id.substr(0, info.id.size() - 4);
    auto caption = ReadFile(JoinPath(data, stem + ".txt"));
    ASSERT_TRUE(caption.ok());
    auto text = (*encoder)->EncodeText(std::string(absl::StripAsciiWhitespace(*caption)));
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(record->prompt_embeds.sizes(), (std::vector<int64_t>{32, 32}));
    EXPECT_TRUE(at::allclose(record->prompt_embeds, *text, 1e-4, 1e-5)) << info.id;
    // Real tokens carry states, the padding after them is zero (as _get_t5_prompt_embeds pads).
    EXPECT_GT(record->prompt_embeds[0].abs().max().item<float>(), 0.0f);
    EXPECT_EQ(record->prompt_embeds[31].abs().max().item<float>(), 0.0f);
  }

  // Caption dropout's empty caption: `baton text-encode --prompt ""` (held to WanPipeline's by test_umt5.py).
  test_util::ExpectEmptyCaptionOfTextEncode(**reader, pipeline, 32, JoinPath(root, "empty_prompt.safetensors"));

  auto second = test_util::RunCommand(Worker(data, cache, pipeline));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("encoded 0, kept 4 unchanged"), std::string::npos) << second.output;
  ASSERT_TRUE(WriteFileAtomic(JoinPath(data, "yellow_square_fall.txt"), "a yellow square falling slowly").ok());
  auto third = test_util::RunCommand(Worker(data, cache, pipeline));
  ASSERT_EQ(third.exit_code, 0) << third.output;
  EXPECT_NE(third.output.find("encoded 1, kept 3 unchanged"), std::string::npos) << third.output;
}

// `frames` frames of 32x32, frame f a gray of 10·f (a folder clip).
void WriteGrayFrames(const std::string& dir, int frames) {
  ASSERT_TRUE(MakeDirs(dir).ok());
  for (int f = 0; f < frames; ++f) {
    Image img(32, 32);
    img.pixels.assign(32 * 32 * 3, static_cast<uint8_t>(10 * f));
    ASSERT_TRUE(WritePng(JoinPath(dir, absl::StrFormat("f%03d.png", f)), img).ok());
  }
}

// A Wan dataset as users fill it (issue 44): a still image, a short clip and a long one, with frame buckets 1, 5 and 9
// and each extraction mode; records counted per bucket (latent frames: 9 → 3, 5 → 2, 1 → 1) and per mode.
TEST(WanEncoderWorkerTest, StillsShortClipsAndLongVideosFillTheFrameBucketsByMode) {
  const std::string root = test_util::MakeTempDir("wan_buckets");
  const std::string pipeline = JoinPath(root, "pipeline");
  ASSERT_TRUE(WriteTinyWanPipeline(pipeline, 0).ok());
  const std::string data = JoinPath(root, "data");
  WriteGrayFrames(JoinPath(data, "long"), 21);  // bucket 9: chunk 0, 9; slide (stride 4) 0, 4, 8, 12; uniform 0, 6, 12
  WriteGrayFrames(JoinPath(data, "short"), 6);  // bucket 5: one clip in every mode but uniform
  ASSERT_TRUE(WritePng(JoinPath(data, "still.png"), Image(48, 32)).ok());
  for (const char* name : {"long", "short", "still"}) {
    ASSERT_TRUE(WriteFileAtomic(JoinPath(data, absl::StrCat(name, ".txt")), absl::StrCat("a ", name, " one")).ok());
  }
  auto worker = [&](const std::string& cache, const std::string& mode) {
    return absl::StrCat(
        JoinPath(test_util::BinDir(), "encoder_worker"), " --dataset ", data, " --cache ", cache, " --model ", pipeline,
        " --resolution 32 --frames 1,5,9 --max_sequence_length 32 --threads 1 --frame_extraction ", mode);
  };
  const std::pair<std::string, std::vector<std::string>> modes[] = {
      {"head", {"long", "short", "still.png"}},
      {"chunk", {"long#0", "long#1", "short#0", "still.png"}},
      {"slide --slide_stride 4", {"long#0", "long#1", "long#2", "long#3", "short#0", "still.png"}},
      // uniform over the short one's 6 frames: numpy.linspace(0, 1, 3) as ints, 0 0 1: clips from frames 0 and 1.
      {"uniform --clips_per_video 3", {"long#0", "long#1", "long#2", "short#0", "short#1", "still.png"}}};
  for (const auto& [mode, ids] : modes) {
    const std::string cache = JoinPath(root, absl::StrCat("cache_", mode.substr(0, mode.find(' '))));
    auto run = test_util::RunCommand(worker(cache, mode));
    ASSERT_EQ(run.exit_code, 0) << mode << "\n" << run.output;
    auto index = ReadCacheIndex(cache);
    ASSERT_TRUE(index.ok()) << index.status();
    std::vector<std::string> got;
    std::map<int64_t, int> per_bucket;
    for (const CacheRecordInfo& r : index->records) {
      got.push_back(r.id);
      ++per_bucket[r.frames];
      EXPECT_EQ(r.frames, r.SampleName() == "long" ? 3 : r.SampleName() == "short" ? 2 : 1) << mode << " " << r.id;
    }
    EXPECT_EQ(got, ids) << mode;
    EXPECT_EQ(per_bucket[1], 1) << mode;
    EXPECT_EQ(per_bucket[2],
              std::count_if(ids.begin(), ids.end(), [](const std::string& id) { return id.rfind("short", 0) == 0; }))
        << mode;
  }
  // The clips of one video are not the same clip: chunk's second starts 9 frames (a gray of 90) after the first.
  auto chunks = CacheReader::Open(JoinPath(root, "cache_chunk"));
  ASSERT_TRUE(chunks.ok());
  EXPECT_FALSE(at::equal((*chunks)->Load(0)->latents, (*chunks)->Load(1)->latents));
  // A rerun keeps every clip.
  auto rerun = test_util::RunCommand(worker(JoinPath(root, "cache_chunk"), "chunk"));
  EXPECT_NE(rerun.output.find("encoded 0, kept 3 unchanged"), std::string::npos) << rerun.output;

  // Service mode (a job's encode: {frames, frame_extraction, slide_stride}): the request's options, as the flags;
  // frame buckets that are not 4k+1 are refused.
  WanEncoderOptions options;
  options.max_sequence_length = 32;
  auto encoder = WanSampleEncoder::Open(pipeline, options);
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  EncoderServiceImpl service(encoder->get(), {.default_resolutions = {32}, .cache_root = root});
  auto local = test_util::ServeEncoder(&service);
  ASSERT_TRUE(local->server);
  auto encode = [&](const std::vector<int64_t>& frames) {
    v1::EncodeDatasetRequest req;
    req.set_dataset_dir(data);
    req.set_cache_dir(JoinPath(root, "cache_service"));
    for (int64_t f : frames) req.add_frames(f);
    req.set_frame_extraction("slide");
    req.set_slide_stride(4);
    grpc::ClientContext ctx;
    auto reader = local->stub->EncodeDataset(&ctx, req);
    v1::EncodeProgress msg;
    while (reader->Read(&msg)) {
    }
    return reader->Finish();
  };
  EXPECT_EQ(encode({1, 5, 6}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  grpc::Status served = encode({1, 5, 9});
  ASSERT_TRUE(served.ok()) << served.error_message();
  auto index = ReadCacheIndex(JoinPath(root, "cache_service"));
  ASSERT_TRUE(index.ok());
  std::vector<std::string> ids;
  for (const CacheRecordInfo& r : index->records) ids.push_back(r.id);
  EXPECT_EQ(ids, modes[2].second);

  // A request naming no frames or extraction runs under the worker's flags, --max_frames and --frame_stride always
  // (no job key sets them): stride 2, at most 5 frames: "long" (21 frames) keeps 5 of its 11, 2 latent frames;
  // "short" (6) keeps 1 of its 3.
  EncoderServiceConfig flags{.default_resolutions = {32}, .cache_root = root};
  flags.video.max_frames = 5;
  flags.video.stride = 2;
  EncoderServiceImpl flagged(encoder->get(), flags);
  auto flagged_local = test_util::ServeEncoder(&flagged);
  ASSERT_TRUE(flagged_local->server);
  v1::EncodeDatasetRequest plain;
  plain.set_dataset_dir(data);
  plain.set_cache_dir(JoinPath(root, "cache_flags"));
  grpc::ClientContext ctx;
  auto reader = flagged_local->stub->EncodeDataset(&ctx, plain);
  v1::EncodeProgress msg;
  while (reader->Read(&msg)) {
  }
  grpc::Status status = reader->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  auto flagged_index = ReadCacheIndex(JoinPath(root, "cache_flags"));
  ASSERT_TRUE(flagged_index.ok());
  std::map<std::string, int64_t> frames;
  for (const CacheRecordInfo& r : flagged_index->records) frames[r.id] = r.frames;
  EXPECT_EQ(frames, (std::map<std::string, int64_t>{{"long", 2}, {"short", 1}, {"still.png", 1}}));
}

// A clip's mask must be the size of its frames, as an image's is (docs/jobs.md, "Masked loss"): one of another size
// fails that clip by name instead of weighting the wrong tokens.
TEST(WanEncoderWorkerTest, AClipsMaskOfAnotherSizeFailsTheClipByName) {
  const std::string root = test_util::MakeTempDir("wan_mask_size");
  const std::string pipeline = JoinPath(root, "pipeline");
  ASSERT_TRUE(WriteTinyWanPipeline(pipeline, 0).ok());
  const std::string data = JoinPath(root, "data");
  WriteFrameFolder(JoinPath(data, "bar_frames"));  // 48x32 frames
  ASSERT_TRUE(WriteFileAtomic(JoinPath(data, "bar_frames.txt"), "a green bar moving right").ok());
  Image mask(32, 32);
  std::fill(mask.pixels.begin(), mask.pixels.end(), 255);
  ASSERT_TRUE(WritePng(JoinPath(data, "bar_frames.mask.png"), mask).ok());
  auto run = test_util::RunCommand(Worker(data, JoinPath(root, "cache"), pipeline), /*with_stderr=*/true);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("bar_frames.mask.png: the mask is 32x32, its image 48x32"), std::string::npos)
      << run.output;
}

// Several resolutions of a clip: one record at each ("<clip>@<resolution>"), its latent grid within that area.
TEST(WanEncoderWorkerTest, SeveralResolutionsCacheEachClipAtEach) {
  const std::string root = test_util::MakeTempDir("wan_resolutions");
  const std::string pipeline = JoinPath(root, "pipeline");
  ASSERT_TRUE(WriteTinyWanPipeline(pipeline, 0).ok());
  const std::string data = JoinPath(root, "data");
  WriteFrameFolder(JoinPath(data, "bar_frames"));
  ASSERT_TRUE(WriteFileAtomic(JoinPath(data, "bar_frames.txt"), "a green bar moving right").ok());
  const std::string cache = JoinPath(root, "cache");
  auto run = test_util::RunCommand(absl::StrCat(Worker(data, cache, pipeline), " --resolution 48,32"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  auto index = ReadCacheIndex(cache);
  ASSERT_TRUE(index.ok()) << index.status();
  ASSERT_EQ(index->records.size(), 2u);
  EXPECT_EQ(index->records[0].id, "bar_frames@32");
  EXPECT_EQ(index->records[1].id, "bar_frames@48");
  for (const CacheRecordInfo& r : index->records) {
    EXPECT_LE(r.grid_h * r.grid_w * 64, r.resolution * r.resolution) << r.id;  // latent cells of 8 x 8 pixels
    EXPECT_EQ(r.frames, 2) << r.id;
  }
  EXPECT_LT(index->records[0].grid_h * index->records[0].grid_w, index->records[1].grid_h * index->records[1].grid_w);
  // A clip without a caption is one failure, named once, whatever the number of resolutions.
  WriteFrameFolder(JoinPath(data, "uncaptioned"));
  auto rerun = test_util::RunCommand(absl::StrCat(Worker(data, cache, pipeline), " --resolution 48,32"), true);
  EXPECT_NE(rerun.output.find("encoded 0, kept 2 unchanged, 1 failed of 3 samples"), std::string::npos) << rerun.output;
}

// Image-to-video: each record carries its clip's first-frame conditioning; an image beside the clip (same stem)
// replaces the clip's own first frame there (and only there), and changing it re-encodes that clip alone.
TEST(WanEncoderWorkerTest, ImageToVideoConditioningTakesASidecarImageAsTheFirstFrame) {
  const std::string root = test_util::MakeTempDir("wan_encoder_i2v");
  const std::string pipeline = JoinPath(root, "pipeline");
  ASSERT_TRUE(WriteTinyWanPipeline(pipeline, 2, "i2v").ok());
  const std::string data = JoinPath(root, "data"), cache = JoinPath(root, "cache");
  ASSERT_TRUE(MakeDirs(data).ok());
  for (const char* name : {"red_circle_right", "yellow_square_fall"}) {
    for (const char* ext : {".mp4", ".txt"}) {
      std::filesystem::copy_file(JoinPath(test_util::SourceDir(), absl::StrCat("data/wan_sample/", name, ext)),
                                 JoinPath(data, absl::StrCat(name, ext)));
    }
  }
  auto load = [&](const std::string& id) {
    auto reader = CacheReader::Open(cache);
    EXPECT_TRUE(reader.ok()) << reader.status();
    EXPECT_EQ((*reader)->index().conditioning, "wan_first_frame");
    for (size_t i = 0; i < (*reader)->size(); ++i) {
      if ((*reader)->index().records[i].id == id) return *(*reader)->Load(i);
    }
    ADD_FAILURE() << id;
    return CacheSample{};
  };
  auto first = test_util::RunCommand(Worker(data, cache, pipeline));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const CacheSample own = load("red_circle_right.mp4");
  ASSERT_EQ(own.condition.size(0), 4 + own.latents.size(0));  // mask, then the first frame's latents
  Image gray;
  gray.width = gray.height = 64;
  gray.pixels.assign(64 * 64 * 3, 128);
  ASSERT_TRUE(WritePng(JoinPath(data, "red_circle_right.png"), gray).ok());
  auto second = test_util::RunCommand(Worker(data, cache, pipeline));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("encoded 1, kept 1 unchanged"), std::string::npos) << second.output;
  const CacheSample sidecar = load("red_circle_right.mp4");
  EXPECT_TRUE(at::equal(sidecar.latents, own.latents));  // the clip itself is unchanged
  EXPECT_TRUE(at::equal(sidecar.condition.slice(0, 0, 4), own.condition.slice(0, 0, 4)));
  EXPECT_GT((sidecar.condition - own.condition).abs().max().item<double>(), 1e-3);

  // A first-frame image equal to the clip's frame 0 conditions as the frame itself does, also where the scale to the
  // bucket is not whole (70x45 frames into 64x32: 41.1 rows), so the image and the frames are scaled alike.
  const std::string pan = JoinPath(data, "pan");
  ASSERT_TRUE(MakeDirs(pan).ok());
  Image frame(70, 45);
  for (size_t i = 0; i < frame.pixels.size(); ++i) frame.pixels[i] = static_cast<uint8_t>((i * 37) % 251);
  for (int f = 0; f < 5; ++f) ASSERT_TRUE(WritePng(JoinPath(pan, absl::StrCat("f", f, ".png")), frame).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(data, "pan.txt"), "a pan").ok());
  ASSERT_EQ(test_util::RunCommand(Worker(data, cache, pipeline)).exit_code, 0);
  const CacheSample frame_itself = load("pan");
  ASSERT_TRUE(WritePng(JoinPath(data, "pan.png"), frame).ok());
  ASSERT_EQ(test_util::RunCommand(Worker(data, cache, pipeline)).exit_code, 0);
  EXPECT_TRUE(at::equal(load("pan").condition, frame_itself.condition));
}

TEST(WanEncoderWorkerTest, ClipWithoutCaptionOrUndecodableFailsAlone) {
  const std::string root = test_util::MakeTempDir("wan_encoder_bad");
  const std::string pipeline = JoinPath(root, "pipeline");
  ASSERT_TRUE(WriteTinyWanPipeline(pipeline, 1).ok());
  const std::string data = JoinPath(root, "data");
  ASSERT_TRUE(MakeDirs(data).ok());
  std::filesystem::copy_file(JoinPath(test_util::SourceDir(), "data/wan_sample/red_circle_right.mp4"),
                             JoinPath(data, "nocaption.mp4"));
  ASSERT_TRUE(WriteFileAtomic(JoinPath(data, "garbage.mp4"), "not a video").ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(data, "garbage.txt"), "noise").ok());
  auto run = test_util::RunCommand(Worker(data, JoinPath(root, "cache"), pipeline), /*with_stderr=*/true);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("missing caption file"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("garbage.mp4"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("encoded 0, kept 0 unchanged, 2 failed of 2 samples"), std::string::npos) << run.output;
}

// Issue 35: a clip whose caption or conditioning image is a link out of the dataset (`walk.txt -> /etc/passwd`) fails
// alone, named, and nothing outside is encoded; the operator's --follow_links_into opens the folder.
TEST(WanEncoderWorkerTest, ClipsLinkedOutOfTheDatasetFailAloneUnlessTheOperatorOpensTheFolder) {
  const std::string root = test_util::MakeTempDir("wan_encoder_links");
  const std::string pipeline = JoinPath(root, "pipeline");
  ASSERT_TRUE(WriteTinyWanPipeline(pipeline, 1).ok());
  const std::string data = JoinPath(root, "data");
  const std::string library = JoinPath(root, "library");
  ASSERT_TRUE(MakeDirs(data).ok());
  ASSERT_TRUE(MakeDirs(library).ok());
  const std::string clip = JoinPath(test_util::SourceDir(), "data/wan_sample/red_circle_right.mp4");
  std::filesystem::copy_file(clip, JoinPath(data, "kept.mp4"));
  ASSERT_TRUE(WriteFileAtomic(JoinPath(data, "kept.txt"), "a red circle").ok());
  std::filesystem::copy_file(clip, JoinPath(data, "leak.mp4"));
  ASSERT_TRUE(WriteFileAtomic(JoinPath(library, "passwd"), "root:x:0:0").ok());
  std::filesystem::create_symlink(JoinPath(library, "passwd"), JoinPath(data, "leak.txt"));
  auto run = test_util::RunCommand(Worker(data, JoinPath(root, "cache"), pipeline), /*with_stderr=*/true);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find(absl::StrCat("error: ", JoinPath(data, "leak.txt"), " resolves to ", *RealPath(library),
                                         "/passwd, outside the dataset folder")),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("encoded 1, kept 0 unchanged, 1 failed of 2 samples"), std::string::npos) << run.output;

  auto opened = test_util::RunCommand(
      absl::StrCat(Worker(data, JoinPath(root, "cache"), pipeline), " --follow_links_into ", library),
      /*with_stderr=*/true);
  EXPECT_EQ(opened.exit_code, 0) << opened.output;
  EXPECT_NE(opened.output.find("encoded 1, kept 1 unchanged, 0 failed of 2 samples"), std::string::npos)
      << opened.output;
}

}  // namespace
}  // namespace baton
