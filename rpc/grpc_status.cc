#include "rpc/grpc_status.h"

#include <absl/strings/cord.h>
#include <absl/strings/str_cat.h>

#include <string>

#include "core/util/status.h"

namespace baton {
namespace {

constexpr absl::string_view kErrorDetailsUrl = "type.googleapis.com/grpc.error_details";

// grpc::StatusCode and absl::StatusCode share google.rpc.Code's numbering (0..16); anything else is
// not a code either side defines.
bool IsCanonicalCode(int code) { return code >= 0 && code <= 16; }

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const int code = static_cast<int>(status.code());
  const grpc::StatusCode grpc_code =
      IsCanonicalCode(code) ? static_cast<grpc::StatusCode>(code) : grpc::StatusCode::UNKNOWN;
  std::string details;
  if (absl::optional<absl::Cord> payload = status.GetPayload(kErrorDetailsUrl)) {
    details = std::string(*payload);
  }
  // The one exit to peers and users: no libtorch backtrace leaves a process, whatever wrapped it.
  return grpc::Status(grpc_code, StripTorchBacktrace(std::string(status.message())), details);
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  const int code = static_cast<int>(status.error_code());
  absl::Status result(IsCanonicalCode(code) ? static_cast<absl::StatusCode>(code) : absl::StatusCode::kUnknown,
                      status.error_message());
  if (!status.error_details().empty()) {
    result.SetPayload(kErrorDetailsUrl, absl::Cord(status.error_details()));
  }
  return result;
}

absl::Status FromGrpcStatus(const grpc::Status& status, absl::string_view context) {
  absl::Status result = FromGrpcStatus(status);
  if (result.ok() || context.empty()) return result;
  absl::Status annotated(result.code(), absl::StrCat(context, ": ", result.message()));
  result.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) { annotated.SetPayload(url, payload); });
  return annotated;
}

}  // namespace baton
