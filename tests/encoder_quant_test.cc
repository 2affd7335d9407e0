// encoder_worker --quantize end to end on a tiny FLUX.2 pipeline: the text encoder's precision is part of every
// record's identity, so a cache made at another precision is re-encoded (and kept on a rerun at the same one), and
// the service refuses a job asking for a precision its encoder was not loaded with.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <string>

#include "baton/v1/encoder.grpc.pb.h"
#include "core/encode/flux2_encoder.h"
#include "core/image/image.h"
#include "core/testing/paths.h"
#include "core/testing/run_command.h"
#include "core/testing/tiny_flux2.h"
#include "core/train/job.h"
#include "core/util/files.h"
#include "encoder_worker/encoder_service.h"
#include "rpc/grpc_options.h"
#include "tests/local_encoder_server.h"

namespace baton {
namespace {

Image Picture(int w, int h, uint8_t base) {
  Image img;
  img.width = w;
  img.height = h;
  img.pixels.resize(static_cast<size_t>(w) * h * 3);
  for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<uint8_t>(base + (i * 5) % 40);
  return img;
}

class EncoderQuantTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = test_util::MakeTempDir("encoder_quant");
    pipeline_ = JoinPath(root_, "pipeline");
    ASSERT_TRUE(WriteTinyFlux2Pipeline(pipeline_, 0).ok());
    data_ = JoinPath(root_, "data");
    ASSERT_TRUE(MakeDirs(data_).ok());
    ASSERT_TRUE(WritePng(JoinPath(data_, "one.png"), Picture(64, 64, 30)).ok());
    ASSERT_TRUE(WriteFileAtomic(JoinPath(data_, "one.txt"), "a textured square").ok());
    ASSERT_TRUE(WritePng(JoinPath(data_, "two.png"), Picture(64, 64, 90)).ok());
    ASSERT_TRUE(WriteFileAtomic(JoinPath(data_, "two.txt"), "another square").ok());
  }
  test_util::CommandResult Encode(const std::string& quantize) {
    return test_util::RunCommand(
        absl::StrCat(JoinPath(test_util::BinDir(), "encoder_worker"), " --dataset ", data_, " --cache ",
                     JoinPath(root_, "cache"), " --model ", pipeline_,
                     " --resolution 64 --max_sequence_length 32 --threads 1 --quantize ", quantize),
        /*with_stderr=*/true);
  }
  std::string root_, pipeline_, data_;
};

TEST_F(EncoderQuantTest, ChangingThePrecisionReencodesTheCache) {
  auto none = Encode("none");
  EXPECT_EQ(none.exit_code, 0) << none.output;
  EXPECT_NE(none.output.find("encoded 2, kept 0 unchanged"), std::string::npos) << none.output;
  auto int8 = Encode("int8");
  EXPECT_EQ(int8.exit_code, 0) << int8.output;
  EXPECT_NE(int8.output.find("encoded 2, kept 0 unchanged"), std::string::npos) << int8.output;
  auto again = Encode("int8");
  EXPECT_NE(again.output.find("encoded 0, kept 2 unchanged"), std::string::npos) << again.output;
  auto fp8 = Encode("fp8");
  EXPECT_NE(fp8.output.find("encoded 2, kept 0 unchanged"), std::string::npos) << fp8.output;
  auto bad = Encode("int4");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--quantize"), std::string::npos) << bad.output;
}

TEST_F(EncoderQuantTest, TheServiceRefusesAnotherPrecision) {
  Flux2EncoderOptions options;
  options.text_quantize = WeightQuant::kInt8;
  auto encoder = Flux2SampleEncoder::Open(pipeline_, options);
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  EXPECT_NE((*encoder)->identity().find(":text-int8"), std::string::npos) << (*encoder)->identity();
  EncoderServiceImpl service(encoder->get(),
                             {.default_resolutions = {64}, .cache_root = root_, .quantize = WeightQuant::kInt8});
  auto local = test_util::ServeEncoder(&service);
  ASSERT_TRUE(local->server);
  auto& stub = local->stub;
  auto call = [&](const std::string& quantize) {
    v1::EncodeDatasetRequest req;
    req.set_dataset_dir(data_);
    req.set_cache_dir(JoinPath(root_, "service_cache"));
    req.set_quantize(quantize);
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineAfter(absl::Seconds(60)));
    auto reader = stub->EncodeDataset(&ctx, req);
    v1::EncodeProgress msg;
    while (reader->Read(&msg)) {
    }
    return reader->Finish();
  };
  const grpc::Status refused = call("fp8");
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.error_message().find("--quantize fp8"), std::string::npos) << refused.error_message();
  EXPECT_TRUE(call("int8").ok());
  EXPECT_TRUE(call("").ok());  // no precision asked: the worker's
}

TEST(EncodeQuantizeKeyTest, TheJobsEncodeQuantizeIsChecked) {
  const std::string head =
      "model: m\ndataset: d\nsteps: 1\nbatch_size: 1\nmicro_batches: 1\n"
      "encode: {images: i, encoder_worker: 'a:1'";
  auto absent = ParseJobYaml(head + "}\n");
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_EQ(absent->encode.quantize, "");  // the worker's own precision
  auto int8 = ParseJobYaml(head + ", quantize: int8}\n");
  ASSERT_TRUE(int8.ok()) << int8.status();
  EXPECT_EQ(int8->encode.quantize, "int8");
  auto bad = ParseJobYaml(head + ", quantize: int4}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("quantize"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace baton
