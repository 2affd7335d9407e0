#include "ui/http_server.h"

#include <absl/strings/str_cat.h>
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace baton {
namespace {

// One raw HTTP exchange: `request` sent as is, everything the server answers until it closes.
std::string Exchange(const std::string& address, const std::string& request) {
  const int port = std::stoi(address.substr(address.rfind(':') + 1));
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return "";
  }
  (void)!::write(fd, request.data(), request.size());
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

TEST(HttpServerTest, ParsesTheRequestAndRefusesALargeBodyUnread) {
  HttpRequest seen;
  HttpServerOptions options;
  options.listen = "127.0.0.1:0";
  options.max_body_bytes = 64;
  auto server = HttpServer::Start(options, [&](const HttpRequest& req, HttpResponder& out) {
    seen = req;
    out.Send({200, "text/plain", {{"X-Test", "1"}}, "hello"});
  });
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string addr = (*server)->address();
  ASSERT_NE(addr, "127.0.0.1:0");
  const std::string body = "a=1&name=J%C3%B6b+x&csrf=%3Cz%3E";
  std::string reply = Exchange(addr, absl::StrCat("POST /jobs/3?smoothing=0.5 HTTP/1.1\r\nHost: h\r\nCookie: x=1; "
                                                  "baton_session=abc\r\nContent-Length: ",
                                                  body.size(), "\r\nConnection: close\r\n\r\n", body));
  EXPECT_TRUE(reply.rfind("HTTP/1.1 200 OK", 0) == 0) << reply;
  EXPECT_NE(reply.find("Cache-Control: no-store"), std::string::npos);
  EXPECT_NE(reply.find("\r\n\r\nhello"), std::string::npos);
  EXPECT_EQ(seen.method, "POST");
  EXPECT_EQ(seen.path, "/jobs/3");
  EXPECT_EQ(seen.Param("smoothing"), "0.5");
  EXPECT_EQ(seen.Param("name", true),
            "J\xC3\xB6"
            "b x");
  EXPECT_EQ(seen.Param("csrf", true), "<z>");
  EXPECT_EQ(seen.Param("missing", true), "");
  EXPECT_EQ(seen.Cookie("baton_session"), "abc");
  EXPECT_EQ(seen.Header("host"), "h");

  seen = HttpRequest();
  reply = Exchange(addr, "POST /submit HTTP/1.1\r\nHost: h\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n" +
                             std::string(1000, 'x'));
  EXPECT_TRUE(reply.rfind("HTTP/1.1 413", 0) == 0) << reply;
  EXPECT_EQ(seen.method, "");  // the handler never ran
}

TEST(HttpServerTest, StreamsUntilTheHandlerIsDone) {
  HttpServerOptions options;
  options.listen = "127.0.0.1:0";
  auto server = HttpServer::Start(options, [](const HttpRequest&, HttpResponder& out) {
    out.Start(200, "text/event-stream");
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(out.Write(absl::StrCat("data: ", i, "\n\n")));
  });
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string reply = Exchange((*server)->address(), "GET /e HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_NE(reply.find("Content-Type: text/event-stream"), std::string::npos);
  EXPECT_NE(reply.find("data: 0\n\ndata: 1\n\ndata: 2\n\n"), std::string::npos) << reply;
}

TEST(HttpServerTest, AnAddressInUseIsAnError) {
  HttpServerOptions options;
  options.listen = "127.0.0.1:0";
  auto first = HttpServer::Start(options, [](const HttpRequest&, HttpResponder& out) { out.Send({}); });
  ASSERT_TRUE(first.ok());
  options.listen = (*first)->address();
  auto second = HttpServer::Start(options, [](const HttpRequest&, HttpResponder& out) { out.Send({}); });
  EXPECT_FALSE(second.ok());
}

}  // namespace
}  // namespace baton
