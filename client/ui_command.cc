#include "client/ui_command.h"

#include <absl/strings/match.h>
#include <absl/strings/str_cat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "client/client_security.h"
#include "core/util/status.h"
#include "core/util/stop_signals.h"
#include "rpc/tls.h"
#include "ui/ui_server.h"

namespace baton {
namespace {

std::string DefaultServer() {
  const char* env = std::getenv("BATON_COORDINATOR");
  return env != nullptr && *env != '\0' ? env : "127.0.0.1:7070";
}

bool Loopback(const std::string& listen) {
  return absl::StartsWith(listen, "127.") || absl::StartsWith(listen, "localhost:") ||
         absl::StartsWith(listen, "[::1]:");
}

absl::Status RunUi(const Args& args) {
  UiOptions options;
  const bool insecure = args.GetBool("insecure");
  if (insecure) {  // the job service checks no token: the page asks for the view's own
    if (args.Get("token-file").empty()) {
      return absl::InvalidArgumentError(
          "baton ui --insecure needs --token-file FILE: the token its page asks for (a job service started with "
          "--insecure checks none, and the page must not be open to everyone)");
    }
    ASSIGN_OR_RETURN(options.local_token, ReadTokenFile(args.Get("token-file")));
  }
  ASSIGN_OR_RETURN(auto credentials, ClientCredentials(args, /*with_token=*/false));
  char cwd[4096];
  if (::getcwd(cwd, sizeof cwd) != nullptr) options.working_dir = cwd;
  JobClient jobs(args.Get("server"), credentials);
  UiServer ui(&jobs, options);
  HttpServerOptions http;
  http.listen = args.Get("listen");
  ASSIGN_OR_RETURN(auto server,
                   HttpServer::Start(http, [&ui](const HttpRequest& req, HttpResponder& out) { ui.Handle(req, out); }));
  if (!Loopback(server->address())) {
    std::fprintf(stderr,
                 "baton ui: WARNING: serving plain HTTP on %s: the sign-in token and the session cookie cross the "
                 "network unencrypted; keep 127.0.0.1 (an SSH tunnel reaches it) or put a TLS proxy in front\n",
                 server->address().c_str());
  }
  std::printf("baton ui: serving http://%s/ for the job service %s (Ctrl-C stops)\n", server->address().c_str(),
              args.Get("server").c_str());
  std::fflush(stdout);
  StopFlags& stop = InstallStopSignals(SecondSignal::kStops);
  while (!stop.stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::printf("baton ui: stopped\n");
  return absl::OkStatus();
}

}  // namespace

Command UiCommand() {
  std::vector<FlagSpec> flags = {
      {"server", "the job service (coordinator --listen) HOST:PORT; env BATON_COORDINATOR", DefaultServer()},
      {"listen", "where the page is served, HOST:PORT (port 0: any free one)", "127.0.0.1:8675"}};
  for (FlagSpec& f : SecurityFlags()) {
    if (f.name == "token-file") {
      f.help = "with --insecure: the token the page asks for (with TLS the page asks for the job service's own)";
    }
    flags.push_back(std::move(f));
  }
  return {"ui", "Serve a browser view of a job service: jobs, live loss, samples, stop/continue/submit, downloads.",
          std::move(flags), RunUi};
}

}  // namespace baton
