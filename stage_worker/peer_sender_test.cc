// The peer sender's queue is bounded (issue 27, defect 9): a stalled neighbour makes the compute thread wait
// before queueing past --send_queue_bytes instead of piling pinned host memory up without limit, and a failed
// neighbour never blocks a Send. A real gRPC server whose Push holds each call until the test lets it go.
#include "stage_worker/peer_sender.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "rpc/grpc_options.h"

namespace baton {
namespace {

// Push reads the whole stream, then waits until Open() before answering.
class GatedStageService : public v1::StageService::Service {
 public:
  grpc::Status Push(grpc::ServerContext* ctx, grpc::ServerReader<v1::Envelope>* reader, v1::PushAck* ack) override {
    v1::Envelope e;
    uint64_t bytes = 0;
    while (reader->Read(&e)) bytes += e.ByteSizeLong();
    std::unique_lock<std::mutex> lock(mu_);
    ++arrived_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return released_ > 0 || ctx->IsCancelled(); });
    if (released_ > 0) --released_;
    ack->set_num_bytes(bytes);
    return grpc::Status::OK;
  }
  void Open(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    released_ += n;
    cv_.notify_all();
  }
  bool WaitArrived(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return arrived_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0, released_ = 0;
};

TensorMap Bundle(int64_t floats) { return {{"x", at::zeros({floats})}}; }

v1::EnvelopeHeader Header(int mb) {
  v1::EnvelopeHeader h;
  h.set_job_id("job");
  h.set_micro_batch(mb);
  h.set_kind(v1::EnvelopeHeader::ACTIVATION);
  return h;
}

TEST(PeerSenderTest, SendWaitsWhileTheQueueIsFullAndGoesOnOnceItDrains) {
  GatedStageService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  ApplyServerOptions(builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_TRUE(server && port > 0);
  const uint64_t bundle = 256 << 10;  // 64 Ki floats
  PeerSender sender(absl::StrCat("127.0.0.1:", port), "stage 1", absl::Seconds(30), WireDtype::kNone, {},
                    /*max_queued_bytes=*/2 * bundle);
  sender.Send(Header(0), Bundle(64 << 10));  // in flight, held by the server
  ASSERT_TRUE(service.WaitArrived(1));
  sender.Send(Header(1), Bundle(64 << 10));  // queued: 2 bundles, at the bound
  EXPECT_EQ(sender.queued_bytes(), 2 * bundle);
  std::atomic<bool> third_queued{false};
  std::thread compute([&] {
    sender.Send(Header(2), Bundle(64 << 10));  // would make 3: waits
    third_queued = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(third_queued.load()) << "Send queued past max_queued_bytes";
  EXPECT_EQ(sender.queued_bytes(), 2 * bundle);
  service.Open(1);  // the first push completes: room for the third
  compute.join();
  EXPECT_TRUE(third_queued.load());
  service.Open(2);
  EXPECT_TRUE(sender.Flush(absl::Seconds(10)).ok());
  EXPECT_EQ(sender.queued_bytes(), 0u);
  server->Shutdown(std::chrono::system_clock::now());
}

TEST(PeerSenderTest, AFailedPeerNeverBlocksSend) {
  // Nothing listens there: the first push fails, the failure is sticky, and further sends return at once.
  PeerSender sender("127.0.0.1:1", "stage 1", absl::Seconds(5), WireDtype::kNone, {}, /*max_queued_bytes=*/1024);
  sender.Send(Header(0), Bundle(4096));
  const absl::Status flushed = sender.Flush(absl::Seconds(10));
  ASSERT_FALSE(flushed.ok());
  EXPECT_NE(flushed.message().find("stage 1"), std::string::npos) << flushed;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; i < 5; ++i) sender.Send(Header(i), Bundle(4096));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  EXPECT_EQ(sender.queued_bytes(), 0u);
}

}  // namespace
}  // namespace baton
