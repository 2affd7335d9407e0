// The one place that converts between absl::Status (used everywhere inside Baton) and grpc::Status (used
// only at RPC boundaries). Codes map one to one (both follow google.rpc.Code), so retry semantics survive
// the trip: only UNAVAILABLE is worth retrying, INVALID_ARGUMENT never is.
#pragma once

#include <absl/status/status.h>
#include <absl/strings/string_view.h>
#include <grpcpp/support/status.h>

namespace baton {

// absl -> grpc, for returning from a service method. Keeps code and message.
grpc::Status ToGrpcStatus(const absl::Status& status);

// grpc -> absl, for a client call's result. Keeps code, message and (as the payload
// "type.googleapis.com/grpc.error_details", when present) the binary error details.
absl::Status FromGrpcStatus(const grpc::Status& status);

// Same, prefixing the message with `context` so the error names the peer and the call, e.g.
// "stage 1 (10.0.0.2:7001) Push step 3 micro-batch 0: ...".
absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view context);

}  // namespace baton
