// The browser view's downloads are checked as `baton download` checks them: against a real gRPC server that sends
// the chunks a job service would, or sends them wrong, the file is passed on whole only when it matches its SHA-256,
// and a bad last chunk is never passed on (the browser then gets fewer bytes than announced: a failed download).
#include "ui/job_client.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

namespace baton {
namespace {

// How the fake service's Download goes wrong.
enum class Fault { kNone, kOffset, kSha, kNoSha, kShort };

class ChunkService final : public v1::JobService::Service {
 public:
  explicit ChunkService(std::string file) : file_(std::move(file)) {}
  // Set by the test while the handler of the download it gave up on may still be writing (ThreadSanitizer).
  std::atomic<Fault> fault{Fault::kNone};

  grpc::Status Download(grpc::ServerContext*, const v1::DownloadRequest*,
                        grpc::ServerWriter<v1::FileChunk>* writer) override {
    const Fault fault = this->fault.load();
    Sha256 hash;
    hash.Update(file_);
    const std::string sha = DigestToHex(hash.Finish());
    const size_t kChunk = 4;
    const size_t size = fault == Fault::kShort ? file_.size() - 3 : file_.size();
    for (size_t at = 0; at < size; at += kChunk) {
      v1::FileChunk c;
      c.set_data(file_.substr(at, std::min(kChunk, size - at)));
      c.set_offset(fault == Fault::kOffset && at == 8 ? 9 : static_cast<int64_t>(at));
      c.set_total_bytes(static_cast<int64_t>(file_.size()));
      if (at + kChunk >= size && fault != Fault::kNoSha)
        c.set_sha256(fault == Fault::kSha ? std::string(64, '0') : sha);
      writer->Write(c);
    }
    return grpc::Status::OK;
  }

 private:
  std::string file_;
};

class JobClientDownloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    client_ = std::make_unique<JobClient>(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  }
  void TearDown() override { server_->Shutdown(); }

  // What the view passed on, and the status.
  std::pair<std::string, absl::Status> Download() {
    std::string got;
    absl::Status s = client_->Download("", v1::DownloadRequest(), [&](const v1::FileChunk& c) {
      got += c.data();
      return true;
    });
    return {got, s};
  }

  const std::string file_ = "a LoRA of twenty-nine bytes..";
  ChunkService service_{file_};
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<JobClient> client_;
};

TEST_F(JobClientDownloadTest, AFileThatMatchesItsShaIsPassedOnWhole) {
  auto [got, status] = Download();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(got, file_);
}

TEST_F(JobClientDownloadTest, AWrongShaWithholdsTheLastChunk) {
  service_.fault = Fault::kSha;
  auto [got, status] = Download();
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_NE(status.message().find("SHA-256"), std::string::npos) << status;
  EXPECT_LT(got.size(), file_.size());
  EXPECT_EQ(got, file_.substr(0, got.size()));
}

TEST_F(JobClientDownloadTest, AChunkOutOfPlaceOrAMissingEndOrShaIsRefused) {
  for (Fault fault : {Fault::kOffset, Fault::kNoSha, Fault::kShort}) {
    service_.fault = fault;
    auto [got, status] = Download();
    EXPECT_TRUE(absl::IsDataLoss(status)) << static_cast<int>(fault) << ": " << status;
    EXPECT_LT(got.size(), file_.size() - (fault == Fault::kShort ? 3 : 0)) << static_cast<int>(fault);
  }
}

}  // namespace
}  // namespace baton
