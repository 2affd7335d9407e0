// A small HTTP/1.1 server over civetweb (Debian's libcivetweb): one handler for every request, run on civetweb's
// worker threads. A request's body is read only up to a limit (a larger one is refused with 413 before it is read);
// a handler either sends one whole response or streams one (a download) until it is sent or the client goes.
#pragma once

#include <absl/status/statusor.h>

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

struct mg_context;
struct mg_connection;

namespace baton {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // URL-decoded, as sent ("/jobs/3"): not cleaned, so a handler sees any ".."
  std::string query;   // raw, after '?'
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;                            // application/x-www-form-urlencoded or text, at most the limit

  std::string Header(const std::string& lower_name) const;
  std::string Cookie(const std::string& name) const;
  // A field of the query string, or of a urlencoded body (`from_body`), decoded; "" when absent.
  std::string Param(const std::string& name, bool from_body = false) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/html; charset=utf-8";
  std::vector<std::pair<std::string, std::string>> headers;  // extra: Set-Cookie, Location, Content-Disposition
  std::string body;
};

// What a handler answers through. Send once, or Start then Write (until it returns false: the client went).
class HttpResponder {
 public:
  explicit HttpResponder(mg_connection* conn) : conn_(conn) {}
  void Send(const HttpResponse& response);
  // Headers of a streamed response (no Content-Length; the connection closes at the end).
  void Start(int status, const std::string& content_type,
             const std::vector<std::pair<std::string, std::string>>& headers = {});
  bool Write(const std::string& data);
  bool started() const { return started_; }

 private:
  mg_connection* conn_;
  bool started_ = false;
};

// How long an idle kept-alive connection keeps its worker thread before it is closed.
constexpr int kKeepAliveMs = 500;

using HttpHandler = std::function<void(const HttpRequest&, HttpResponder&)>;

struct HttpServerOptions {
  std::string listen = "127.0.0.1:8675";  // host:port; port 0 picks a free one
  size_t max_body_bytes = 1 << 20;
  // Each request holds one while it is answered (a download until it is sent), an idle kept-alive connection for
  // at most kKeepAliveMs; an open page holds none between its asks (ui/assets.cc).
  int threads = 48;
};

class HttpServer {
 public:
  // Listens and serves until destroyed.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options, HttpHandler handler);
  ~HttpServer();
  const std::string& address() const { return address_; }  // "host:port", the port picked

 private:
  HttpServer(HttpServerOptions options, HttpHandler handler)
      : options_(std::move(options)), handler_(std::move(handler)) {}
  static int OnRequest(mg_connection* conn, void* self);

  const HttpServerOptions options_;
  const HttpHandler handler_;
  mg_context* ctx_ = nullptr;
  std::string address_;
};

// Status line words of the codes the view uses ("Not Found").
const char* HttpReason(int status);

}  // namespace baton
