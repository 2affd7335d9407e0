#include "stage_worker/peer_sender.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "rpc/grpc_options.h"
#include "rpc/grpc_status.h"
#include "rpc/tls.h"
#include "stage_worker/inbox.h"
#include "wire/envelope.h"

namespace baton {

PeerSender::PeerSender(const std::string& address, std::string peer_name, absl::Duration timeout, WireDtype wire_dtype,
                       LinkCounters link, uint64_t max_queued_bytes)
    : peer_name_(std::move(peer_name)),
      timeout_(timeout),
      wire_dtype_(wire_dtype),
      link_(link),
      max_queued_bytes_(max_queued_bytes) {
  stub_ = v1::StageService::NewStub(MakeChannel(address, ProcessChannelCredentials()));
  thread_ = std::thread([this] { Loop(); });
}

PeerSender::~PeerSender() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    if (active_ != nullptr) active_->TryCancel();  // a push to a stalled peer must not hold up a reconfigure
  }
  thread_.join();
}

void PeerSender::Send(v1::EnvelopeHeader header, TensorMap tensors, std::function<void()> ready) {
  const uint64_t bytes = BundleBytes(tensors);
  {
    absl::MutexLock lock(&mu_);
    // The sender's own push has a deadline, so this wait ends: the queue drains, or the push fails (sticky error).
    auto room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return queued_bytes_ == 0 || queued_bytes_ + bytes <= max_queued_bytes_ || stop_ || !error_.ok();
    };
    mu_.Await(absl::Condition(&room));
    if (!error_.ok() || stop_) return;  // reported by Flush; nothing more is sent after a failure
    queue_.push_back({std::move(header), std::move(tensors), std::move(ready), bytes});
    queued_bytes_ += bytes;
    link_.SetQueued(queued_bytes_);
  }
}

bool PeerSender::failed() const {
  absl::MutexLock lock(&mu_);
  return !error_.ok();
}

uint64_t PeerSender::queued_bytes() const {
  absl::MutexLock lock(&mu_);
  return queued_bytes_;
}

absl::Status PeerSender::Flush(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto delivered = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return (queue_.empty() && !busy_) || !error_.ok(); };
  const bool done = mu_.AwaitWithTimeout(absl::Condition(&delivered), timeout);
  if (!error_.ok()) return error_;
  if (!done) {
    return absl::DeadlineExceededError(
        absl::StrCat("sending to ", peer_name_, " did not finish within ", absl::FormatDuration(timeout)));
  }
  return absl::OkStatus();
}

double PeerSender::busy_seconds() const {
  absl::MutexLock lock(&mu_);
  if (!busy_) return 0;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since_).count();
}

uint64_t PeerSender::bytes_sent() const {
  absl::MutexLock lock(&mu_);
  return bytes_sent_;
}

void PeerSender::Loop() {
  while (true) {
    Item item;
    {
      absl::MutexLock lock(&mu_);
      auto work = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&work));
      if (stop_) return;
      item = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      busy_since_ = std::chrono::steady_clock::now();
    }
    absl::Status status;
    uint64_t bytes = 0;
    if (item.ready) item.ready();
    const auto t0 = std::chrono::steady_clock::now();
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(DeadlineAfter(timeout_));
      {
        absl::MutexLock lock(&mu_);
        if (stop_) return;
        active_ = &ctx;
      }
      v1::PushAck ack;
      auto writer = stub_->Push(&ctx, &ack);
      status = WriteEnvelope(writer.get(), item.header, item.tensors, kMaxChunkBytes, wire_dtype_);
      writer->WritesDone();
      absl::Status finished = FromGrpcStatus(writer->Finish());
      if (status.ok() || !finished.ok()) status = finished;  // the server's reason beats "stream broke"
      bytes = ack.num_bytes();
      absl::MutexLock lock(&mu_);
      active_ = nullptr;
    }
    link_.Sent(bytes, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    {
      absl::MutexLock lock(&mu_);
      busy_ = false;
      bytes_sent_ += bytes;
      queued_bytes_ -= item.bytes;
      if (!status.ok() && error_.ok()) {
        error_ = absl::Status(status.code(),
                              absl::StrCat("sending ", v1::EnvelopeHeader::Kind_Name(item.header.kind()), " of ",
                                           WorkName(item.header.step(), item.header.pass()), " micro-batch ",
                                           item.header.micro_batch(), " to ", peer_name_, ": ", status.message()));
        queue_.clear();
        queued_bytes_ = 0;
      }
      link_.SetQueued(queued_bytes_);
    }
  }
}

}  // namespace baton
