#include "core/testing/prometheus_scrape.h"

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace baton::test_util {
namespace {

// label="value" pairs of a sample line's {...}, escapes kept as written (tests compare plain values).
std::map<std::string, std::string> ParseLabels(const std::string& inside) {
  std::map<std::string, std::string> out;
  size_t i = 0;
  while (i < inside.size()) {
    const size_t eq = inside.find('=', i);
    if (eq == std::string::npos || eq + 1 >= inside.size() || inside[eq + 1] != '"') break;
    size_t end = eq + 2;
    while (end < inside.size() && inside[end] != '"') end += inside[end] == '\\' ? 2 : 1;
    out[inside.substr(i, eq - i)] = inside.substr(eq + 2, end - eq - 2);
    i = end + 1;
    if (i < inside.size() && inside[i] == ',') ++i;
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> HttpGet(const std::string& address, const std::string& path, int timeout_ms) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return absl::InvalidArgumentError(absl::StrCat("no port in ", address));
  const std::string host = address.substr(0, colon), port = address.substr(colon + 1);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", address));
  }
  const int fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
  const int rc = fd < 0 ? -1 : connect(fd, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (rc != 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) close(fd);
    return absl::UnavailableError(absl::StrCat("connect ", address, ": ", why));
  }
  const std::string request = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", address, "\r\n\r\n");
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("write to ", address, " failed"));
  }
  std::string response;
  char buf[16384];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) {
      close(fd);
      return absl::DeadlineExceededError(absl::StrCat("no reply from ", address, path));
    }
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    response.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (body == std::string::npos) return absl::DataLossError(absl::StrCat("malformed reply from ", address));
  const std::string status_line = response.substr(0, response.find("\r\n"));
  if (status_line.find(" 200") == std::string::npos) {
    return absl::UnavailableError(absl::StrCat(address, path, ": ", status_line));
  }
  return response.substr(body + 4);
}

double SumSamples(const std::string& text, const std::string& name, const std::map<std::string, std::string>& labels) {
  double sum = 0;
  bool found = false;
  for (absl::string_view line_view : absl::StrSplit(text, '\n')) {
    const std::string line(line_view);
    if (line.empty() || line[0] == '#' || line.compare(0, name.size(), name) != 0) continue;
    std::map<std::string, std::string> have;
    size_t value_at = name.size();
    if (line.size() > name.size() && line[name.size()] == '{') {
      const size_t close = line.rfind('}');
      if (close == std::string::npos) continue;
      have = ParseLabels(line.substr(name.size() + 1, close - name.size() - 1));
      value_at = close + 1;
    } else if (line.size() <= name.size() || line[name.size()] != ' ') {
      continue;  // a longer name with this prefix
    }
    bool match = true;
    for (const auto& [k, v] : labels) match = match && have.count(k) && have[k] == v;
    std::vector<std::string> fields = absl::StrSplit(line.substr(value_at), ' ', absl::SkipEmpty());
    double value = 0;
    if (!match || fields.empty() || !absl::SimpleAtod(fields[0], &value)) continue;
    sum += value;
    found = true;
  }
  return found ? sum : -1;
}

}  // namespace baton::test_util
