#include "rpc/rpc_metrics.h"

#include <absl/status/status.h>

#include "core/metrics/families.h"

namespace baton {
namespace {

using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::InterceptorBatchMethods;

void Count(const char* side, const char* method, const grpc::Status& status) {
  if (status.ok()) return;
  CountRpcError(side, RpcMethodLabel(method != nullptr ? method : ""), RpcCodeLabel(status.error_code()));
}

class ServerErrorCounter : public grpc::experimental::Interceptor {
 public:
  explicit ServerErrorCounter(const char* method) : method_(method) {}
  void Intercept(InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      Count("server", method_, methods->GetSendStatus());
    }
    methods->Proceed();
  }

 private:
  const char* method_;
};

class ClientErrorCounter : public grpc::experimental::Interceptor {
 public:
  explicit ClientErrorCounter(const char* method) : method_(method) {}
  void Intercept(InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_STATUS)) {
      const grpc::Status* status = methods->GetRecvStatus();
      if (status != nullptr) Count("client", method_, *status);
    }
    methods->Proceed();
  }

 private:
  const char* method_;
};

class ServerFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    return new ServerErrorCounter(info->method());
  }
};

class ClientFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateClientInterceptor(grpc::experimental::ClientRpcInfo* info) override {
    return new ClientErrorCounter(info->method());
  }
};

}  // namespace

std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> RpcErrorServerInterceptors() {
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> out;
  out.push_back(std::make_unique<ServerFactory>());
  return out;
}

std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> RpcErrorClientInterceptors() {
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> out;
  out.push_back(std::make_unique<ClientFactory>());
  return out;
}

std::string RpcMethodLabel(const std::string& full_method) {
  std::string m = full_method;
  if (!m.empty() && m.front() == '/') m.erase(0, 1);
  const size_t slash = m.find('/');
  const size_t dot = m.rfind('.', slash);
  if (slash != std::string::npos && dot != std::string::npos) m.erase(0, dot + 1);
  return m;
}

std::string RpcCodeLabel(grpc::StatusCode code) {
  // grpc::StatusCode and absl::StatusCode share google.rpc.Code's numbering (rpc/grpc_status.h).
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

}  // namespace baton
