#include "core/metrics/metrics_server.h"

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/metric_family.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <thread>
#include <utility>

#include "core/metrics/families.h"
#include "core/metrics/process_memory.h"
#include "core/util/thread_stack.h"

namespace baton {
namespace {

// The registry, with the scrape-time gauges brought up to date first. Collect runs on the HTTP server's thread,
// where an exception would end the process: a refresh that fails leaves the gauges as they were.
class RefreshingRegistry : public prometheus::Collectable {
 public:
  explicit RefreshingRegistry(std::function<void()> refresh) : refresh_(std::move(refresh)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    try {
      const int64_t rss = ResidentMemoryBytes();
      if (rss >= 0) ProcessFamilies().resident_memory_bytes.Add({}).Set(static_cast<double>(rss));
      if (refresh_) refresh_();
    } catch (...) {
      ProcessFamilies().refresh_errors.Add({}).Increment();
    }
    return MetricsRegistry()->Collect();
  }

 private:
  const std::function<void()> refresh_;
};

absl::Status BadAddress(const std::string& text, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("--metrics '", text, "': ", why, " (expected HOST:PORT, e.g. ",
                                                 "127.0.0.1:9400 or 0.0.0.0:0 for any free port)"));
}

// Opens and closes a TCP connection to host:port (IPv4; 0.0.0.0 means loopback), ignoring failures.
void KnockOnce(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, host == "0.0.0.0" ? "127.0.0.1" : host.c_str(), &addr.sin_addr) != 1) return;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  (void)connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  close(fd);
}

}  // namespace

absl::StatusOr<MetricsAddress> ParseMetricsAddress(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) return BadAddress(text, "no port");
  MetricsAddress out;
  out.host = text.substr(0, colon);
  const std::string port = text.substr(colon + 1);
  if (!absl::SimpleAtoi(port, &out.port) || out.port < 0 || out.port > 65535) {
    return BadAddress(text, absl::StrCat("port '", port, "' is not a number in 0-65535"));
  }
  if (out.host.empty()) return BadAddress(text, "no host");
  if (out.host == "localhost") out.host = "127.0.0.1";
  unsigned char buf[16];
  if (out.host.front() == '[' && out.host.back() == ']') {
    if (inet_pton(AF_INET6, out.host.substr(1, out.host.size() - 2).c_str(), buf) != 1) {
      return BadAddress(text, absl::StrCat("'", out.host, "' is not an IPv6 address"));
    }
  } else if (inet_pton(AF_INET, out.host.c_str(), buf) != 1) {
    return BadAddress(text, absl::StrCat("host '", out.host, "' is not an IPv4 address ([v6] in brackets)"));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& address,
                                                                    const std::string& process,
                                                                    std::function<void()> refresh) {
  auto parsed = ParseMetricsAddress(address);
  if (!parsed.ok()) return parsed.status();
  if (!ThreadStacksIncludeStaticTls()) {  // civetweb's threads could not start (core/util/thread_stack.cc)
    return absl::InternalError(absl::StrCat("metrics: this binary does not export pthread_attr_setstacksize (link ",
                                            "it with baton_core's options); civetweb's threads cannot start"));
  }
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  try {
    server->exposer_ = std::make_unique<prometheus::Exposer>(absl::StrCat(parsed->host, ":", parsed->port), 2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("metrics: cannot serve on ", address, ": ", e.what()));
  }
  const std::vector<int> ports = server->exposer_->GetListeningPorts();
  if (ports.empty() || ports.front() <= 0) {
    return absl::UnavailableError(absl::StrCat("metrics: serving on ", address, " but no port was bound"));
  }
  server->port_ = ports.front();
  server->address_ = absl::StrCat(parsed->host, ":", server->port_);
  SetBuildInfo(process);
  ProcessFamilies();  // the process families appear in every scrape, even before anything is counted
  server->collectable_ = std::make_shared<RefreshingRegistry>(std::move(refresh));
  server->exposer_->RegisterCollectable(server->collectable_);
  return server;
}

MetricsServer::~MetricsServer() {
  // civetweb's listening thread notices a stop only when its poll() returns, which without traffic takes up to
  // 2 s; knocking on the port while the Exposer stops ends that wait at once.
  std::atomic<bool> stopped{false};
  std::thread knock([&] {
    while (!stopped.load()) {
      KnockOnce(address_.substr(0, address_.rfind(':')), port_);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  exposer_.reset();
  stopped = true;
  knock.join();
}

std::string MetricsServer::url() const { return absl::StrCat("http://", address_, "/metrics"); }

absl::StatusOr<std::unique_ptr<MetricsServer>> StartMetricsServerFromFlag(const std::string& flag,
                                                                          const std::string& process, bool print,
                                                                          std::function<void()> refresh) {
  if (flag.empty()) return std::unique_ptr<MetricsServer>();
  auto server = MetricsServer::Start(flag, process, std::move(refresh));
  if (!server.ok()) return server.status();
  if (print) {
    std::printf("metrics: %s\n", (*server)->url().c_str());
    std::fflush(stdout);
  }
  return server;
}

}  // namespace baton
