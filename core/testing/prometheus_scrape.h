// Test helpers for metrics: a plain HTTP/1.0 GET over a socket (what Prometheus does to /metrics, minus the
// extras), and a reader for the text exposition format that sums the samples of one metric whose labels
// include the given ones.
#pragma once

#include <absl/status/statusor.h>

#include <map>
#include <string>

namespace baton::test_util {

// The body of http://`address``path` ("127.0.0.1:9400", "/metrics"); an error unless the status is 200.
absl::StatusOr<std::string> HttpGet(const std::string& address, const std::string& path = "/metrics",
                                    int timeout_ms = 5000);

// Sum of the samples of `name` (exact metric name, e.g. "baton_step_duration_seconds_count") whose labels
// include every pair of `labels`; -1 when there is none.
double SumSamples(const std::string& text, const std::string& name,
                  const std::map<std::string, std::string>& labels = {});

}  // namespace baton::test_util
