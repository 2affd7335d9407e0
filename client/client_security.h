// How `baton` authenticates to Baton servers (rpc/tls.h): the flags every network command takes, and the
// channel credentials they make.
#pragma once

#include <absl/status/statusor.h>
#include <grpcpp/security/credentials.h>

#include <memory>
#include <vector>

#include "client/args.h"

namespace baton {

// The flags (underscores work as well as dashes: --tls_dir):
//   --tls-dir DIR      ca.crt (+ tls.crt/tls.key, + token when present), as `baton certs` writes DIR/client; env
//                      BATON_TLS_DIR
//   --tls-ca/--tls-cert/--tls-key FILE   the same one by one (a client certificate only stage and encoder
//                      workers ask for)
//   --token-file FILE  the job service's bearer token (default: $BATON_TOKEN, else <tls-dir>/token)
//   --insecure         plaintext, no token (a coordinator started with --insecure)
std::vector<FlagSpec> SecurityFlags();

// Credentials from SecurityFlags' values. Neither TLS nor --insecure: FailedPrecondition saying what to pass.
// `with_token` false: TLS only, no token (`baton ui` sends each signed-in user's own with every call).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClientCredentials(const Args& args, bool with_token = true);

}  // namespace baton
