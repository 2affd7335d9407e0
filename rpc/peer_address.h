// The host part of a gRPC peer string (ServerContext::peer()): "ipv4:10.0.0.1:5000" → "10.0.0.1",
// "ipv6:[::1]:5000" (or its %5B...%5D spelling) → "::1". Empty for anything else (a unix socket).
#pragma once

#include <absl/strings/string_view.h>

#include <string>

namespace baton {

std::string PeerHost(absl::string_view grpc_peer);

}  // namespace baton
