// Counts every gRPC call that ends with a status other than OK in baton_rpc_errors_total{side, method, code},
// on both ends, through gRPC interceptors so no handler or call site has to remember: servers built with
// ApplyServerOptions and channels made by MakeChannel (rpc/grpc_options.h) carry them.
#pragma once

#include <grpcpp/support/client_interceptor.h>
#include <grpcpp/support/server_interceptor.h>
#include <grpcpp/support/status.h>

#include <memory>
#include <string>
#include <vector>

namespace baton {

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> RpcErrorServerInterceptors();
std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> RpcErrorClientInterceptors();

// The method label: "/baton.v1.StageService/Push" → "StageService/Push" (the package dropped).
std::string RpcMethodLabel(const std::string& full_method);
// The code label: the gRPC code's name, e.g. "UNAVAILABLE".
std::string RpcCodeLabel(grpc::StatusCode code);

}  // namespace baton
