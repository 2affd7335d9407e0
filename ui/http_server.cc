#include "ui/http_server.h"

#include <absl/strings/ascii.h>
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>
#include <civetweb.h>

#include <algorithm>
#include <mutex>

#include "core/util/thread_stack.h"

namespace baton {
namespace {

// %XX and '+' decoded.
std::string FormDecode(absl::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out.push_back(' ');
    } else if (s[i] == '%' && i + 2 < s.size()) {
      int v = 0;
      if (absl::SimpleHexAtoi(s.substr(i + 1, 2), &v)) {
        out.push_back(static_cast<char>(v));
        i += 2;
      } else {
        out.push_back(s[i]);
      }
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::string FormField(absl::string_view data, const std::string& name) {
  for (absl::string_view pair : absl::StrSplit(data, '&', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
    if (FormDecode(kv.first) == name) return FormDecode(kv.second);
  }
  return "";
}

void EnsureLibrary() {
  static std::once_flag once;
  std::call_once(once, [] { mg_init_library(0); });
}

}  // namespace

const char* HttpReason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 206:
      return "Partial Content";
    case 303:
      return "See Other";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 409:
      return "Conflict";
    case 413:
      return "Payload Too Large";
    case 416:
      return "Range Not Satisfiable";
    case 500:
      return "Internal Server Error";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    default:
      return status < 400 ? "OK" : "Error";
  }
}

std::string HttpRequest::Header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? "" : it->second;
}

std::string HttpRequest::Cookie(const std::string& name) const {
  for (absl::string_view part : absl::StrSplit(Header("cookie"), ';', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    if (absl::StripAsciiWhitespace(kv.first) == name) return std::string(absl::StripAsciiWhitespace(kv.second));
  }
  return "";
}

std::string HttpRequest::Param(const std::string& name, bool from_body) const {
  return FormField(from_body ? body : query, name);
}

void HttpResponder::Send(const HttpResponse& r) {
  std::string head = absl::StrCat("HTTP/1.1 ", r.status, " ", HttpReason(r.status),
                                  "\r\nContent-Type: ", r.content_type, "\r\nContent-Length: ", r.body.size(),
                                  "\r\nX-Content-Type-Options: nosniff\r\nX-Frame-Options: DENY\r\n"
                                  "Referrer-Policy: same-origin\r\n");
  bool cache_control = false;
  for (const auto& [k, v] : r.headers) {
    absl::StrAppend(&head, k, ": ", v, "\r\n");
    cache_control = cache_control || absl::AsciiStrToLower(k) == "cache-control";
  }
  if (!cache_control) head += "Cache-Control: no-store\r\n";
  head += "\r\n";
  started_ = true;
  mg_write(conn_, head.data(), head.size());
  if (!r.body.empty()) mg_write(conn_, r.body.data(), r.body.size());
}

void HttpResponder::Start(int status, const std::string& content_type,
                          const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string head = absl::StrCat("HTTP/1.1 ", status, " ", HttpReason(status), "\r\nContent-Type: ", content_type,
                                  "\r\nCache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
                                  "Connection: close\r\n");
  for (const auto& [k, v] : headers) absl::StrAppend(&head, k, ": ", v, "\r\n");
  head += "\r\n";
  started_ = true;
  mg_write(conn_, head.data(), head.size());
}

bool HttpResponder::Write(const std::string& data) {
  return data.empty() || mg_write(conn_, data.data(), data.size()) == static_cast<int>(data.size());
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options, HttpHandler handler) {
  EnsureLibrary();
  if (!ThreadStacksIncludeStaticTls()) {  // civetweb's threads could not start (core/util/thread_stack.cc)
    return absl::InternalError(
        "this binary does not export pthread_attr_setstacksize (link it with baton_core's "
        "options); civetweb's threads cannot start");
  }
  std::unique_ptr<HttpServer> server(new HttpServer(options, std::move(handler)));
  const std::string threads = absl::StrCat(options.threads), keep_alive = absl::StrCat(kKeepAliveMs);
  const char* mg_options[] = {"listening_ports",
                              options.listen.c_str(),
                              "num_threads",
                              threads.c_str(),
                              "enable_keep_alive",
                              "yes",
                              "keep_alive_timeout_ms",
                              keep_alive.c_str(),
                              "request_timeout_ms",
                              "30000",
                              nullptr};
  mg_callbacks callbacks{};
  mg_init_data init{&callbacks, server.get(), mg_options};
  unsigned code = 0;
  char text[256] = "";
  mg_error_data error{&code, text, sizeof text};
  server->ctx_ = mg_start2(&init, &error);
  if (server->ctx_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve HTTP on ", options.listen, ": ", text));
  }
  mg_set_request_handler(server->ctx_, "/", &HttpServer::OnRequest, server.get());
  mg_server_port ports[4];
  const int n = mg_get_server_ports(server->ctx_, 4, ports);
  const std::string host = options.listen.substr(0, options.listen.rfind(':'));
  server->address_ = n > 0 ? absl::StrCat(host, ":", ports[0].port) : options.listen;
  return server;
}

HttpServer::~HttpServer() {
  if (ctx_ != nullptr) mg_stop(ctx_);
}

int HttpServer::OnRequest(mg_connection* conn, void* self_ptr) {
  auto* self = static_cast<HttpServer*>(self_ptr);
  const mg_request_info* info = mg_get_request_info(conn);
  HttpRequest req;
  req.method = info->request_method != nullptr ? info->request_method : "";
  req.path = info->local_uri_raw != nullptr ? info->local_uri_raw : "";
  req.query = info->query_string != nullptr ? info->query_string : "";
  for (int i = 0; i < info->num_headers; ++i) {
    req.headers[absl::AsciiStrToLower(info->http_headers[i].name)] = info->http_headers[i].value;
  }
  HttpResponder responder(conn);
  if (info->content_length > static_cast<long long>(self->options_.max_body_bytes)) {
    responder.Send({413,
                    "text/plain; charset=utf-8",
                    {{"Connection", "close"}},
                    absl::StrCat("request body over ", self->options_.max_body_bytes, " bytes: refused\n")});
    return 413;
  }
  if (info->content_length > 0) {
    req.body.resize(static_cast<size_t>(info->content_length));
    size_t got = 0;
    while (got < req.body.size()) {
      const int n = mg_read(conn, req.body.data() + got, req.body.size() - got);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    req.body.resize(got);
  }
  self->handler_(req, responder);
  if (!responder.started()) responder.Send({500, "text/plain; charset=utf-8", {}, "no response\n"});
  return 200;
}

}  // namespace baton
