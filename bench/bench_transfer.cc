// Activation transfer throughput: the real StageService.Push RPC (chunked envelope over loopback gRPC)
// against a raw TCP socket over 127.0.0.1 sending the same bytes, for 1..256 MiB tensors. The TCP
// receiver allocates a tensor-sized buffer per transfer and copies into it, like the gRPC receiver, and
// both sides wait for an acknowledgement, so each time covers "sender starts" to "receiver holds the
// tensor". Reports the median of a few repetitions after one warm-up (gRPC's flow-control windows take
// a transfer or two to settle). The last line is one JSON object.
//
//   bench_transfer [--chunk_kib=1024] [--reps=5] [--max_mib=256] [--device=cpu|cuda:N]
//
// --device=cuda:N adds the stage-to-stage path of a CUDA pipeline: a tensor on the device is downloaded into
// pinned host memory (DeviceTransfer::DownloadAsync), pushed over gRPC, received into pinned host memory
// (ReadEnvelope with HostMemory::kPinned, as a CUDA stage worker receives) and uploaded to the device
// (DeviceTransfer::Upload) before the receiver acks; the row "device" times all of that. On cpu the device
// columns repeat the plain gRPC path (no pinned memory, no copies), so a CPU rehearsal runs the same code.
#include <ATen/ATen.h>
#include <absl/flags/flag.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "baton/v1/stage.grpc.pb.h"
#include "bench/bench_flags.h"
#include "core/device/device.h"
#include "core/device/transfer.h"
#include "rpc/grpc_options.h"
#include "rpc/grpc_status.h"
#include "wire/envelope.h"

ABSL_FLAG(uint64_t, chunk_kib, baton::kMaxChunkBytes >> 10, "gRPC chunk size in KiB");
ABSL_FLAG(int, reps, 5, "timed transfers per size (the median is reported, after one warm-up)");
ABSL_FLAG(int, max_mib, 256, "largest tensor in MiB (sizes double from 1)");
ABSL_FLAG(std::string, device, "cpu", "cpu | cuda:N (adds the device-to-device path of a CUDA pipeline)");

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// ---- gRPC ------------------------------------------------------------------------------------------

// Receives each envelope fully (validated, copied into fresh tensors), acks, and drops it.
// With a device transfer it receives into pinned host memory and uploads each tensor to the device (waiting for
// the copy) before it acks, like a CUDA stage taking an activation.
class SinkService final : public v1::StageService::Service {
 public:
  explicit SinkService(DeviceTransfer* device = nullptr) : device_(device) {}
  grpc::Status Push(grpc::ServerContext*, grpc::ServerReader<v1::Envelope>* reader, v1::PushAck* ack) override {
    const bool pinned = device_ != nullptr && device_->wants_pinned_host();
    absl::StatusOr<ReceivedEnvelope> envelope =
        ReadEnvelope(reader, EnvelopeLimits{}, pinned ? HostMemory::kPinned : HostMemory::kPageable);
    if (!envelope.ok()) return ToGrpcStatus(envelope.status());
    if (device_ != nullptr) {
      for (const auto& [name, host] : envelope->tensors) {
        at::Tensor on_device = device_->Upload(host);
        (void)on_device.sum().item<double>();  // the upload and a kernel reading it have finished
      }
    }
    ack->set_num_tensors(envelope->tensors.size());
    ack->set_num_bytes(envelope->bytes);
    return grpc::Status::OK;
  }

 private:
  DeviceTransfer* device_;
};

// `tensor` may live on a device: `device` then downloads it into pinned host memory first (timed).
double GrpcPushSeconds(v1::StageService::Stub& stub, const at::Tensor& tensor, size_t chunk_bytes,
                       DeviceTransfer* device = nullptr) {
  const auto start = Clock::now();
  at::Tensor host = tensor;
  if (device != nullptr) {
    DeviceTransfer::PendingDownload pending = device->DownloadAsync(tensor);
    if (pending.wait) pending.wait();
    host = pending.host;
  }
  grpc::ClientContext context;
  context.set_deadline(DeadlineAfter(absl::Minutes(5)));
  v1::PushAck ack;
  std::unique_ptr<grpc::ClientWriter<v1::Envelope>> writer = stub.Push(&context, &ack);
  v1::EnvelopeHeader header;
  header.set_job_id("bench");
  header.set_kind(v1::EnvelopeHeader::ACTIVATION);
  absl::Status sent = WriteEnvelope(writer.get(), header, {{"hidden_states", host}}, chunk_bytes);
  writer->WritesDone();
  absl::Status done = FromGrpcStatus(writer->Finish(), "Push");
  const auto end = Clock::now();
  if (!sent.ok() || !done.ok()) BenchDie(done.ok() ? sent.ToString() : done.ToString());
  if (ack.num_bytes() != static_cast<uint64_t>(tensor.numel() * tensor.element_size())) BenchDie("short Push");
  return Seconds(start, end);
}

// ---- raw TCP ---------------------------------------------------------------------------------------

void SendAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) BenchDie(absl::StrFormat("send: %s", std::strerror(errno)));
    p += k;
    n -= static_cast<size_t>(k);
  }
}

bool RecvAll(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t k = ::recv(fd, p, n, 0);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

void NoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Receiver: per message an 8-byte length, then the bytes into a freshly allocated tensor; acks 1 byte.
void TcpReceiver(int listen_fd) {
  int fd = ::accept(listen_fd, nullptr, nullptr);
  if (fd < 0) BenchDie("accept failed");
  NoDelay(fd);
  uint64_t n = 0;
  while (RecvAll(fd, reinterpret_cast<char*>(&n), sizeof(n))) {
    at::Tensor buffer = at::empty({static_cast<int64_t>(n)}, at::kByte);
    if (!RecvAll(fd, static_cast<char*>(buffer.data_ptr()), n)) BenchDie("short TCP read");
    const char ack = 1;
    SendAll(fd, &ack, 1);
  }
  ::close(fd);
}

double TcpSendSeconds(int fd, const at::Tensor& tensor) {
  const auto start = Clock::now();
  at::Tensor cpu = tensor.contiguous();  // same preparation AppendTensorChunks does (a no-op here)
  const uint64_t n = cpu.numel() * cpu.element_size();
  SendAll(fd, reinterpret_cast<const char*>(&n), sizeof(n));
  SendAll(fd, static_cast<const char*>(cpu.data_ptr()), n);
  char ack = 0;
  if (!RecvAll(fd, &ack, 1)) BenchDie("no TCP ack");
  return Seconds(start, Clock::now());
}

struct Row {
  int mib;
  double grpc_s, tcp_s, device_s;
};

int Main(int argc, char** argv) {
  if (absl::Status s = ParseBenchFlags(
          argc, argv, "bench_transfer [--chunk_kib=1024] [--reps=5] [--max_mib=256] [--device=cpu|cuda:N]");
      !s.ok()) {
    BenchDie(std::string(s.message()));
  }
  const size_t chunk_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_chunk_kib)) << 10;
  const int reps = absl::GetFlag(FLAGS_reps);
  const int max_mib = absl::GetFlag(FLAGS_max_mib);
  const std::string device_name = absl::GetFlag(FLAGS_device);
  if (chunk_bytes == 0 || reps < 1) BenchDie("--chunk_kib and --reps must be positive");

  // gRPC endpoint.
  SinkService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  ApplyServerOptions(builder);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) BenchDie("cannot start the gRPC server");
  std::unique_ptr<v1::StageService::Stub> stub =
      v1::StageService::NewStub(MakeChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));

  // The device path: a second sink that receives pinned and uploads, and a sender that downloads first.
  absl::StatusOr<at::Device> device = ParseDevice(device_name);
  if (!device.ok()) BenchDie(device.status().ToString());
  DeviceTransfer sender_transfer(*device), receiver_transfer(*device);
  SinkService device_service(&receiver_transfer);
  grpc::ServerBuilder device_builder;
  int device_port = 0;
  device_builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &device_port);
  ApplyServerOptions(device_builder);
  device_builder.RegisterService(&device_service);
  std::unique_ptr<grpc::Server> device_server = device_builder.BuildAndStart();
  if (!device_server || device_port == 0) BenchDie("cannot start the device gRPC server");
  std::unique_ptr<v1::StageService::Stub> device_stub = v1::StageService::NewStub(
      MakeChannel(absl::StrCat("127.0.0.1:", device_port), grpc::InsecureChannelCredentials()));

  // Raw TCP endpoint.
  int listen_fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(listen_fd, 1) != 0 ||
      ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    BenchDie("cannot listen on 127.0.0.1");
  }
  std::thread receiver(TcpReceiver, listen_fd);
  int tcp_fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (::connect(tcp_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) BenchDie("cannot connect");
  NoDelay(tcp_fd);

  std::vector<Row> rows;
  for (int mib : {1, 4, 16, 64, 256}) {
    if (mib > max_mib) break;
    at::Tensor t = at::rand({static_cast<int64_t>(mib) << 18});  // f32, mib MiB
    at::Tensor on_device = t.to(*device);
    std::vector<double> g, r, d;
    GrpcPushSeconds(*stub, t, chunk_bytes);  // warm-up
    TcpSendSeconds(tcp_fd, t);
    GrpcPushSeconds(*device_stub, on_device, chunk_bytes, &sender_transfer);
    for (int i = 0; i < reps; ++i) {  // interleaved so background load hits all alike
      g.push_back(GrpcPushSeconds(*stub, t, chunk_bytes));
      r.push_back(TcpSendSeconds(tcp_fd, t));
      d.push_back(GrpcPushSeconds(*device_stub, on_device, chunk_bytes, &sender_transfer));
    }
    rows.push_back({mib, Median(g), Median(r), Median(d)});
  }
  ::shutdown(tcp_fd, SHUT_RDWR);
  ::close(tcp_fd);
  receiver.join();
  ::close(listen_fd);
  server->Shutdown(DeadlineAfter(absl::Seconds(2)));
  device_server->Shutdown(DeadlineAfter(absl::Seconds(2)));

  auto gbps = [](int mib, double s) { return (static_cast<double>(mib) * (1 << 20)) / s / 1e9; };
  std::printf(
      "Activation transfer over loopback: gRPC Push (chunk %zu KiB) vs raw TCP, and %s -> pinned host -> gRPC -> "
      "pinned host -> %s, median of %d\n",
      chunk_bytes >> 10, device->str().c_str(), device->str().c_str(), reps);
  std::printf("%8s %12s %12s %12s %12s %8s %12s\n", "MiB", "grpc_ms", "tcp_ms", "grpc_GB/s", "tcp_GB/s", "ratio",
              "device_GB/s");
  std::string per_size;
  double sum_bytes = 0, sum_grpc = 0, sum_tcp = 0;
  for (const Row& row : rows) {
    const double g = gbps(row.mib, row.grpc_s), r = gbps(row.mib, row.tcp_s), dv = gbps(row.mib, row.device_s);
    std::printf("%8d %12.2f %12.2f %12.3f %12.3f %8.3f %12.3f\n", row.mib, row.grpc_s * 1e3, row.tcp_s * 1e3, g, r,
                g / r, dv);
    absl::StrAppendFormat(&per_size,
                          "%s{\"mib\":%d,\"grpc_gbytes_per_s\":%.4f,\"tcp_gbytes_per_s\":%.4f,\"ratio\":%.4f,"
                          "\"device_gbytes_per_s\":%.4f}",
                          per_size.empty() ? "" : ",", row.mib, g, r, g / r, dv);
    sum_bytes += static_cast<double>(row.mib) * (1 << 20);
    sum_grpc += row.grpc_s;
    sum_tcp += row.tcp_s;
  }
  if (rows.empty()) BenchDie("no sizes ran");
  const Row& big = rows.back();
  const double g = gbps(big.mib, big.grpc_s), r = gbps(big.mib, big.tcp_s);
  std::printf(
      "{\"bench\":\"transfer\",\"ratio_basis\":\"largest size (%d MiB)\",\"grpc_gbytes_per_s\":%.4f,"
      "\"tcp_gbytes_per_s\":%.4f,\"ratio\":%.4f,\"aggregate_grpc_gbytes_per_s\":%.4f,"
      "\"aggregate_tcp_gbytes_per_s\":%.4f,\"aggregate_ratio\":%.4f,\"chunk_bytes\":%zu,\"reps\":%d,"
      "\"gbyte\":1e9,\"device\":\"%s\",\"device_gbytes_per_s\":%.4f,\"per_size\":[%s]}\n",
      big.mib, g, r, g / r, sum_bytes / sum_grpc / 1e9, sum_bytes / sum_tcp / 1e9, sum_tcp / sum_grpc, chunk_bytes,
      reps, device->str().c_str(), gbps(big.mib, big.device_s), per_size.c_str());
  return 0;
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) { return baton::Main(argc, argv); }
