#include "client/health_command.h"

#include <absl/strings/str_cat.h>

#include <cstdio>

#include "client/client_security.h"
#include "core/util/status.h"
#include "rpc/health.h"

namespace baton {
namespace {

absl::Status Health(const Args& args) {
  ASSIGN_OR_RETURN(double timeout_s, args.GetDouble("timeout-s"));
  const std::string address = args.Get("ADDRESS");
  const std::string service = args.Get("service");
  ASSIGN_OR_RETURN(auto credentials, ClientCredentials(args));
  ASSIGN_OR_RETURN(HealthState state, CheckHealth(address, service, absl::Seconds(timeout_s), credentials));
  if (state != HealthState::kServing) {
    return absl::UnavailableError(
        absl::StrCat(address, " service '", service, "' is ", HealthStateName(state), ", not SERVING"));
  }
  std::printf("%s%s%s: SERVING\n", address.c_str(), service.empty() ? "" : " ", service.c_str());
  return absl::OkStatus();
}

std::vector<FlagSpec> HealthFlags(FlagSpec address) {
  std::vector<FlagSpec> specs = {address,
                                 {"service",
                                  "service to ask about: '' = the whole server, or baton.v1.StageService | "
                                  "baton.v1.EncoderService | baton.v1.JobService"},
                                 {"timeout-s", "seconds to wait for the answer", "5"}};
  for (FlagSpec& f : SecurityFlags()) specs.push_back(std::move(f));
  return specs;
}

}  // namespace

Command HealthCommand() {
  FlagSpec address{"ADDRESS", "host:port of a stage_worker, encoder_worker --listen or coordinator --listen"};
  address.required = true;
  address.positional = true;
  return {"health", "Ask a Baton server's standard gRPC health service whether it is SERVING (exit 0) or not (exit 1).",
          HealthFlags(address), Health};
}

}  // namespace baton
