// The encoder worker end to end on a tiny but complete FLUX.2 pipeline folder: the real binary in batch
// mode (exit codes, skip on rerun), the gRPC service mode, and the client's debug commands.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "baton/v1/encoder.grpc.pb.h"
#include "coordinator/encoder_client.h"
#include "coordinator/pipeline_trainer.h"
#include "core/data/cache.h"
#include "core/encode/flux2_encoder.h"
#include "core/tensor/safetensors.h"
#include "core/testing/paths.h"
#include "core/testing/run_command.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/job.h"
#include "core/train_local/local_trainer.h"
#include "core/util/files.h"
#include "encoder_worker/bucket.h"
#include "encoder_worker/dataset.h"
#include "encoder_worker/encoder_service.h"
#include "rpc/grpc_options.h"
#include "rpc/tls.h"
#include "stage_driver/local_tls.h"
#include "tests/local_encoder_server.h"
#include "tools/tool_commands.h"

namespace baton {
namespace {

using test_util::BinDir;

// (exit code, stdout) of a shell command.
std::pair<int, std::string> RunEncoder(const std::string& command) {
  auto result = test_util::RunCommand(command);
  return {result.exit_code, result.output};
}

Image WorkerPicture(int w, int h, uint8_t base) {
  Image img;
  img.width = w;
  img.height = h;
  img.pixels.resize(static_cast<size_t>(w) * h * 3);
  for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<uint8_t>(base + (i * 7) % 50);
  return img;
}

class EncoderWorkerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(test_util::MakeTempDir("encoder"));
    ASSERT_TRUE(WriteTinyFlux2Pipeline(Pipeline(), 0).ok());
  }
  static void TearDownTestSuite() { delete root_; }
  static std::string Pipeline() { return JoinPath(*root_, "pipeline"); }

  std::string MakeDataset(const std::string& name) {
    std::string dir = JoinPath(*root_, name);
    EXPECT_TRUE(MakeDirs(dir).ok());
    EXPECT_TRUE(WritePng(JoinPath(dir, "one.png"), WorkerPicture(64, 64, 30)).ok());
    EXPECT_TRUE(WriteFileAtomic(JoinPath(dir, "one.txt"), "a textured square").ok());
    EXPECT_TRUE(WritePng(JoinPath(dir, "two.png"), WorkerPicture(96, 48, 120)).ok());
    EXPECT_TRUE(WriteFileAtomic(JoinPath(dir, "two.txt"), "a wide picture").ok());
    return dir;
  }
  static std::string* root_;
};
std::string* EncoderWorkerTest::root_ = nullptr;

TEST_F(EncoderWorkerTest, BatchModeEncodesReportsBadFilesAndSkipsOnRerun) {
  std::string data = MakeDataset("batch");
  ASSERT_TRUE(WriteFileAtomic(JoinPath(data, "broken.png"), "").ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(data, "broken.txt"), "nothing").ok());
  std::string cache = JoinPath(*root_, "batch_cache");
  std::string cmd = absl::StrCat(JoinPath(BinDir(), "encoder_worker"), " --dataset ", data, " --cache ", cache,
                                 " --model ", Pipeline(), " --resolution 64 --max_sequence_length 96 --threads 1");
  auto [code, out] = RunEncoder(cmd);
  EXPECT_EQ(code, 1) << out;  // one file failed
  EXPECT_NE(out.find("encoded 2, kept 0 unchanged, 1 failed of 3 samples"), std::string::npos) << out;
  auto reader = CacheReader::Open(cache);
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_EQ((*reader)->size(), 2u);
  EXPECT_EQ((*reader)->index().latent_channels, 128);
  EXPECT_EQ((*reader)->index().text_dim, 96);
  auto sample = (*reader)->Load(1);
  ASSERT_TRUE(sample.ok()) << sample.status();
  EXPECT_EQ(sample->prompt_embeds.size(0), 96);
  EXPECT_EQ(sample->latents.size(0), sample->grid_h * sample->grid_w);
  EXPECT_GT(sample->grid_w, sample->grid_h);  // the wide image kept its orientation
  // Caption dropout's empty caption: `baton text-encode --prompt ""` (held to Flux2Pipeline.encode_prompt("") by the
  // upstream referee test_text_encoder.py), at the cache's text length.
  test_util::ExpectEmptyCaptionOfTextEncode(**reader, Pipeline(), 96, JoinPath(*root_, "empty_prompt.safetensors"));

  ASSERT_TRUE(RemoveAll(JoinPath(data, "broken.png")).ok());
  auto [code2, out2] = RunEncoder(cmd);
  EXPECT_EQ(code2, 0) << out2;
  EXPECT_NE(out2.find("encoded 0, kept 2 unchanged"), std::string::npos) << out2;
}

// Issue 35: a caption over kMaxCaptionBytes (here a 20 MB one, as a misplaced log would be) fails that record alone,
// named with its size and the limit; the rest encode.
TEST_F(EncoderWorkerTest, CaptionOverTheLimitFailsItsRecordByNameAndTheRestEncode) {
  std::string data = MakeDataset("long_caption");
  ASSERT_TRUE(WritePng(JoinPath(data, "log.png"), WorkerPicture(64, 64, 60)).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(data, "log.txt"), std::string(20 << 20, 'x')).ok());
  std::string cmd = absl::StrCat(JoinPath(BinDir(), "encoder_worker"), " --dataset ", data, " --cache ",
                                 JoinPath(*root_, "long_caption_cache"), " --model ", Pipeline(),
                                 " --resolution 64 --max_sequence_length 96 --threads 1");
  auto run = test_util::RunCommand(cmd, /*with_stderr=*/true);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find(absl::StrCat("error: ", JoinPath(data, "log.txt"), ": caption is ", 20 << 20,
                                         " bytes, over the limit of ", kMaxCaptionBytes, " bytes")),
            std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("encoded 2, kept 0 unchanged, 1 failed of 3 samples"), std::string::npos) << run.output;
}

// Issue 35: an image or caption that is a link out of the dataset (`p.txt -> /etc/passwd`) fails its record alone,
// named, so a job service's --data_root also fences what is read through a dataset; links within the dataset are
// followed, and the operator's --follow_links_into opens a folder (a shared photo library).
TEST_F(EncoderWorkerTest, LinksOutOfTheDatasetFailTheirRecordUnlessTheOperatorOpensTheFolder) {
  std::string data = MakeDataset("linked");
  const std::string library = JoinPath(*root_, "library");
  ASSERT_TRUE(MakeDirs(library).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(library, "passwd"), "root:x:0:0:root:/root:/bin/bash").ok());
  ASSERT_TRUE(WritePng(JoinPath(library, "photo.png"), WorkerPicture(64, 64, 90)).ok());
  ASSERT_TRUE(WritePng(JoinPath(data, "p.png"), WorkerPicture(64, 64, 10)).ok());
  std::filesystem::create_symlink(JoinPath(library, "passwd"), JoinPath(data, "p.txt"));
  std::filesystem::create_symlink(JoinPath(library, "photo.png"), JoinPath(data, "photo.png"));
  ASSERT_TRUE(WriteFileAtomic(JoinPath(data, "photo.txt"), "a photo from the library").ok());
  std::filesystem::create_symlink("one.txt", JoinPath(data, "three.txt"));  // inside: followed
  std::filesystem::create_symlink("one.png", JoinPath(data, "three.png"));
  std::string cmd = absl::StrCat(JoinPath(BinDir(), "encoder_worker"), " --dataset ", data, " --cache ",
                                 JoinPath(*root_, "linked_cache"), " --model ", Pipeline(),
                                 " --resolution 64 --max_sequence_length 96 --threads 1");
  auto run = test_util::RunCommand(cmd, /*with_stderr=*/true);
  EXPECT_EQ(run.exit_code, 1) << run.output;
  const std::string real_library = *RealPath(library);
  for (const char* name : {"p.txt", "photo.png"}) {
    EXPECT_NE(run.output.find(absl::StrCat("error: ", JoinPath(data, name), " resolves to ", real_library, "/")),
              std::string::npos)
        << name << "\n"
        << run.output;
  }
  EXPECT_NE(run.output.find("encoded 3, kept 0 unchanged, 2 failed of 5 samples"), std::string::npos) << run.output;

  auto opened = test_util::RunCommand(absl::StrCat(cmd, " --follow_links_into ", library), /*with_stderr=*/true);
  EXPECT_EQ(opened.exit_code, 0) << opened.output;
  EXPECT_NE(opened.output.find("encoded 2, kept 3 unchanged, 0 failed of 5 samples"), std::string::npos)
      << opened.output;
  auto missing = test_util::RunCommand(absl::StrCat(cmd, " --follow_links_into ", JoinPath(*root_, "no_such")),
                                       /*with_stderr=*/true);
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("--follow_links_into " + JoinPath(*root_, "no_such") + " is not a folder"),
            std::string::npos)
      << missing.output;
}

TEST_F(EncoderWorkerTest, ServiceModeEncodesOnDemand) {
  auto encoder = Flux2SampleEncoder::Open(Pipeline(), {});
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  EncoderServiceImpl service(encoder->get(), {.default_resolutions = {64}, .cache_root = *root_});
  auto local = test_util::ServeEncoder(&service);
  ASSERT_TRUE(local->server);
  auto& stub = local->stub;
  v1::EncodeDatasetRequest req;
  req.set_dataset_dir(MakeDataset("service"));
  req.set_cache_dir(JoinPath(*root_, "service_cache"));
  // FLUX.2 reference images (a job's encode.control): two.png's, encoded by the real VAE as its image is.
  const std::string control = JoinPath(*root_, "service_control");
  ASSERT_TRUE(MakeDirs(control).ok());
  ASSERT_TRUE(WritePng(JoinPath(control, "two.png"), WorkerPicture(64, 64, 200)).ok());
  req.set_control_dir(control);
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineAfter(absl::Seconds(60)));
  auto reader = stub->EncodeDataset(&ctx, req);
  v1::EncodeProgress msg, last;
  int messages = 0;
  while (reader->Read(&msg)) {
    last = msg;
    ++messages;
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_GE(messages, 3);  // progress per sample, then the report
  EXPECT_TRUE(last.finished());
  EXPECT_EQ(last.encoded(), 2);
  EXPECT_EQ(last.failed(), 0);
  auto cache = CacheReader::Open(req.cache_dir());
  ASSERT_TRUE(cache.ok()) << cache.status();
  ASSERT_EQ((*cache)->size(), 2u);
  EXPECT_EQ((*cache)->index().records[0].references, 0);
  auto two = (*cache)->Load(1);
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_TRUE(two->references.defined());
  const Bucket bucket{static_cast<int>(two->grid_w * 16), static_cast<int>(two->grid_h * 16)};
  auto want = (*encoder)->EncodeImage(ResizeToBucket(WorkerPicture(64, 64, 200), bucket));
  ASSERT_TRUE(want.ok());
  EXPECT_TRUE(at::equal(two->references[0], *want));
}

// Encode `dataset` into `cache` through `stub`: the final status and report.
std::pair<grpc::Status, v1::EncodeProgress> Encode(v1::EncoderService::Stub& stub, const std::string& dataset,
                                                   const std::string& cache) {
  v1::EncodeDatasetRequest req;
  req.set_dataset_dir(dataset);
  req.set_cache_dir(cache);
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineAfter(absl::Seconds(60)));
  auto reader = stub.EncodeDataset(&ctx, req);
  v1::EncodeProgress msg, last;
  while (reader->Read(&msg)) last = msg;
  return {reader->Finish(), last};
}

// Issue 10: the service writes only inside its --cache_root and deletes only records its own index lists.
TEST_F(EncoderWorkerTest, ServiceWritesOnlyInsideItsCacheRootAndKeepsForeignFiles) {
  auto encoder = Flux2SampleEncoder::Open(Pipeline(), {});
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  const std::string allowed = JoinPath(*root_, "allowed");
  const std::string elsewhere = JoinPath(*root_, "elsewhere");
  ASSERT_TRUE(MakeDirs(allowed).ok());
  ASSERT_TRUE(MakeDirs(elsewhere).ok());
  EncoderServiceImpl service(encoder->get(), {.default_resolutions = {64}, .cache_root = allowed});
  auto local = test_util::ServeEncoder(&service);
  ASSERT_TRUE(local->server);
  auto& stub = local->stub;
  const std::string data = MakeDataset("rooted");

  // Outside the root, directly or through a symlink (also one planted as <cache>/records): refused, nothing made.
  auto [outside, r1] = Encode(*stub, data, JoinPath(elsewhere, "cache"));
  EXPECT_EQ(outside.error_code(), grpc::StatusCode::PERMISSION_DENIED) << outside.error_message();
  EXPECT_NE(outside.error_message().find("is outside the allowed root"), std::string::npos) << outside.error_message();
  EXPECT_FALSE(PathExists(JoinPath(elsewhere, "cache")));
  ASSERT_EQ(::symlink(elsewhere.c_str(), JoinPath(allowed, "link").c_str()), 0);
  EXPECT_EQ(Encode(*stub, data, JoinPath(allowed, "link/cache")).first.error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(MakeDirs(JoinPath(allowed, "planted")).ok());
  ASSERT_EQ(::symlink(elsewhere.c_str(), JoinPath(allowed, "planted/records").c_str()), 0);
  EXPECT_EQ(Encode(*stub, data, JoinPath(allowed, "planted")).first.error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // A cache folder that already holds other files: they survive every build, our own stale record does not.
  const std::string cache = JoinPath(allowed, "mixed");
  ASSERT_TRUE(MakeDirs(JoinPath(cache, "records")).ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(cache, "records/notes.txt"), "mine").ok());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(cache, "records/other.safetensors"), "not a record").ok());
  auto [first, report] = Encode(*stub, data, cache);
  ASSERT_TRUE(first.ok()) << first.error_message();
  EXPECT_EQ(report.encoded(), 2);
  ASSERT_TRUE(RemoveAll(JoinPath(data, "two.png")).ok());
  auto [second, report2] = Encode(*stub, data, cache);
  ASSERT_TRUE(second.ok()) << second.error_message();
  EXPECT_EQ(report2.kept(), 1);
  EXPECT_FALSE(PathExists(JoinPath(cache, "records/two.png.safetensors")));  // ours, and stale: gone
  EXPECT_TRUE(PathExists(JoinPath(cache, "records/notes.txt")));
  EXPECT_TRUE(PathExists(JoinPath(cache, "records/other.safetensors")));
  auto reader = CacheReader::Open(cache);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->size(), 1u);
}

// The encoder service over mutual TLS, as a coordinator meets it in production; the coordinator's ephemeral identity
// serves as the worker's too.
struct TlsEncoderServer {
  std::unique_ptr<grpc::Server> server;
  std::string address;
};
TlsEncoderServer StartTlsEncoderServer(EncoderServiceImpl& service) {
  TlsEncoderServer s;
  EXPECT_TRUE(LocalWorkerSecurityArgs().ok());
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", PeerServerCredentials(*GetProcessSecurity()), &port);
  builder.RegisterService(&service);
  s.server = builder.BuildAndStart();
  EXPECT_TRUE(s.server && port > 0);
  s.address = absl::StrCat("127.0.0.1:", port);
  return s;
}

TEST_F(EncoderWorkerTest, CoordinatorEncodesOnDemandThenTrains) {
  auto encoder = Flux2SampleEncoder::Open(Pipeline(), {});
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  EncoderServiceImpl service(encoder->get(), {.default_resolutions = {64}, .cache_root = *root_});
  TlsEncoderServer worker = StartTlsEncoderServer(service);
  std::string cache = JoinPath(*root_, "ondemand_cache");
  auto job = ParseJobYaml(absl::StrCat(
      "model: ", Pipeline(), "\ndataset: ", cache, "\nencode: {images: ", MakeDataset("ondemand"),
      ", encoder_worker: '", worker.address, "', resolution: 64}\nsteps: 2\nbatch_size: 2\nmicro_batches: 2\n"));
  ASSERT_TRUE(job.ok()) << job.status();
  CoordinatorOptions options;
  options.stages = 2;
  options.output_dir = JoinPath(*root_, "ondemand_out");
  options.stage_worker_binary = JoinPath(BinDir(), "stage_worker");
  options.quiet = true;
  auto result = RunCoordinator(*job, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->steps.size(), 2u);
  auto reader = CacheReader::Open(cache);
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ((*reader)->size(), 2u);
  worker.server->Shutdown();
}

TEST_F(EncoderWorkerTest, SamplePromptsAreEncodedOnTheWorker) {
  auto encoder = Flux2SampleEncoder::Open(Pipeline(), {});
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  EncoderServiceImpl service(encoder->get(), {.default_resolutions = {64}, .cache_root = *root_});
  TlsEncoderServer worker = StartTlsEncoderServer(service);
  const absl::Duration timeout = absl::Seconds(60);

  // What the worker sends is its encoder's own output, bit for bit, in request order.
  const std::vector<std::string> prompts = {"a red circle", "a blue square on a yellow background"};
  auto embeds = EncodePromptsOnWorker(worker.address, prompts, 512, timeout);
  ASSERT_TRUE(embeds.ok()) << embeds.status();
  ASSERT_EQ(embeds->size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto expected = (*encoder)->EncodeText(prompts[i]);
    ASSERT_TRUE(expected.ok());
    EXPECT_TRUE(at::equal((*embeds)[i], *expected)) << prompts[i];
  }
  EXPECT_FALSE(at::equal((*embeds)[0], (*embeds)[1]));

  // A length other than the worker's (its cache's) and malformed requests are refused, saying why.
  auto wrong = EncodePromptsOnWorker(worker.address, prompts, 100, timeout);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition) << wrong.status();
  EXPECT_NE(wrong.status().message().find("--max_sequence_length"), std::string::npos) << wrong.status();
  EXPECT_EQ(EncodePromptsOnWorker(worker.address, {}, 512, timeout).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodePromptsOnWorker(worker.address, {std::string(20000, 'x')}, 512, timeout).status().code(),
            absl::StatusCode::kInvalidArgument);
  worker.server->Shutdown();
}

TEST_F(EncoderWorkerTest, CoordinatorWithoutATextEncoderRendersSamplesThroughTheWorker) {
  auto encoder = Flux2SampleEncoder::Open(Pipeline(), {});
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  EncoderServiceImpl service(encoder->get(), {.default_resolutions = {64}, .cache_root = *root_});
  TlsEncoderServer worker = StartTlsEncoderServer(service);
  // The coordinator's copy of the pipeline has no text encoder and no tokenizer (a host too small for them).
  const std::string model = JoinPath(*root_, "no_text_encoder");
  ASSERT_TRUE(MakeDirs(model).ok());
  for (const char* part : {"transformer", "vae", "scheduler", "model_index.json"}) {
    std::filesystem::copy(JoinPath(Pipeline(), part), JoinPath(model, part), std::filesystem::copy_options::recursive);
  }
  auto job = ParseJobYaml(absl::StrCat(
      "model: ", model, "\ndataset: ", JoinPath(*root_, "prompts_cache"), "\nencode: {images: ", MakeDataset("prompts"),
      ", encoder_worker: '", worker.address, "', resolution: 64}\nsteps: 1\nbatch_size: 2\nmicro_batches: 2\n",
      "samples: {every: 1, prompts: [a red circle], steps: 2, size: [32, 32]}\n"));
  ASSERT_TRUE(job.ok()) << job.status();
  const std::string out = JoinPath(*root_, "prompts_out");
  EXPECT_FALSE(LocalPromptEncoder(*job, out)({"a red circle"}, 512).ok()) << "the copy still holds a text encoder";
  CoordinatorOptions options;
  options.stages = 2;
  options.output_dir = out;
  options.stage_worker_binary = JoinPath(BinDir(), "stage_worker");
  options.quiet = true;
  auto result = RunCoordinator(*job, options);
  ASSERT_TRUE(result.ok()) << result.status();
  for (const char* file : {"samples/step-0/0.png", "samples/step-1/0.png", "samples/step-1/contact_sheet.png"}) {
    EXPECT_TRUE(PathExists(JoinPath(out, file))) << file;
  }
  EXPECT_FALSE(PathExists(JoinPath(out, "samples/prompt_embeds.safetensors")));  // nothing encoded here
  worker.server->Shutdown();
}

TEST_F(EncoderWorkerTest, ClientDebugCommandsWriteTheDocumentedKeys) {
  std::string dir = JoinPath(*root_, "cli");
  ASSERT_TRUE(MakeDirs(dir).ok());
  ASSERT_TRUE(WriteSafetensors(JoinPath(dir, "px.safetensors"), {{"pixels", at::rand({2, 3, 32, 48}) * 2 - 1}}).ok());
  ASSERT_EQ(RunTool({"vae-encode", "--model", Pipeline(), "--inputs", JoinPath(dir, "px.safetensors"), "--output",
                     JoinPath(dir, "vae.safetensors")}),
            0);
  auto vae = LoadAllSafetensors(JoinPath(dir, "vae.safetensors"));
  ASSERT_TRUE(vae.ok());
  EXPECT_EQ(vae->at("latents").sizes(), (std::vector<int64_t>{2, 32, 4, 6}));
  EXPECT_EQ(vae->at("packed").sizes(), (std::vector<int64_t>{2, 6, 128}));

  ASSERT_EQ(RunTool({"text-encode", "--model", Pipeline(), "--prompt", "a cat", "--output",
                     JoinPath(dir, "text.safetensors"), "--max-sequence-length", "100"}),
            0);
  auto text = LoadAllSafetensors(JoinPath(dir, "text.safetensors"));
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->at("input_ids").sizes(), (std::vector<int64_t>{1, 100}));
  EXPECT_EQ(text->at("prompt_embeds").sizes(), (std::vector<int64_t>{1, 100, 96}));

  // Raw ids skip template and tokenizer: the output has exactly their length.
  ASSERT_TRUE(
      WriteSafetensors(JoinPath(dir, "ids.safetensors"), {{"input_ids", at::arange(20, 27).view({1, 7})}}).ok());
  ASSERT_EQ(RunTool({"text-encode", "--model", Pipeline(), "--input-ids", JoinPath(dir, "ids.safetensors"), "--output",
                     JoinPath(dir, "ids_out.safetensors")}),
            0);
  auto ids = LoadAllSafetensors(JoinPath(dir, "ids_out.safetensors"));
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->at("prompt_embeds").sizes(), (std::vector<int64_t>{1, 7, 96}));
  EXPECT_EQ(RunTool({"text-encode", "--model", Pipeline(), "--output", JoinPath(dir, "x.safetensors")}), 1);
}

}  // namespace
}  // namespace baton
