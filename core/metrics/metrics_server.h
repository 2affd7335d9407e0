// The HTTP endpoint Prometheus scrapes: prometheus-cpp's Exposer (civetweb) serving MetricsRegistry() in the
// text format at http://HOST:PORT/metrics, with the resident memory (core/metrics/process_memory.h) and what the
// binary adds (its device's memory: core/device/device_memory.h) refreshed on every scrape. Every Baton binary starts
// one from its `--metrics HOST:PORT` flag (empty: none).
#pragma once

#include <absl/status/statusor.h>

#include <functional>
#include <memory>
#include <string>

namespace prometheus {
class Exposer;
class Collectable;
}  // namespace prometheus

namespace baton {

struct MetricsAddress {
  std::string host;  // an IPv4 literal or a bracketed IPv6 literal ("[::1]"); "localhost" becomes 127.0.0.1
  int port = 0;      // 0: any free port
};

// "HOST:PORT" (port 0-65535). INVALID_ARGUMENT naming the flag's text and what is wrong.
absl::StatusOr<MetricsAddress> ParseMetricsAddress(const std::string& text);

class MetricsServer {
 public:
  // Serves on `address` ("HOST:PORT"; port 0 picks a free one) and sets baton_build_info{process}; `refresh` (if
  // any) runs before each scrape, on the HTTP server's thread (what it throws counts a refresh error).
  // UNAVAILABLE when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& address, const std::string& process,
                                                              std::function<void()> refresh = nullptr);
  ~MetricsServer();

  // "host:port" with the bound port.
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  std::string url() const;  // http://host:port/metrics

 private:
  MetricsServer() = default;

  std::string address_;
  int port_ = 0;
  std::shared_ptr<prometheus::Collectable> collectable_;
  std::unique_ptr<prometheus::Exposer> exposer_;
};

// What a binary's main does with its --metrics flag: empty → nullptr (no server); otherwise starts the server
// and, with `print`, prints `metrics: http://HOST:PORT/metrics` on stdout (flushed). The coordinator prints its
// own line instead, once it knows its stage workers' ports (coordinator/coordinator_metrics.h).
absl::StatusOr<std::unique_ptr<MetricsServer>> StartMetricsServerFromFlag(const std::string& flag,
                                                                          const std::string& process, bool print = true,
                                                                          std::function<void()> refresh = nullptr);

}  // namespace baton
