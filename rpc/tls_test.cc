#include "rpc/tls.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "baton/v1/stage.grpc.pb.h"
#include "core/testing/tiny_flux2.h"
#include "core/util/files.h"
#include "rpc/certs.h"
#include "rpc/grpc_options.h"
#include "rpc/health.h"

namespace baton {
namespace {

TEST(TlsTest, ConstantTimeEqualsComparesBytesAndLengths) {
  EXPECT_TRUE(ConstantTimeEquals("Bearer abc", "Bearer abc"));
  EXPECT_FALSE(ConstantTimeEquals("Bearer abc", "Bearer abd"));
  EXPECT_FALSE(ConstantTimeEquals("Bearer abc", "Bearer abc0"));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_FALSE(ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0c", 3)));
}

TEST(TlsTest, LoopbackListenAddresses) {
  EXPECT_TRUE(IsLoopbackListen("127.0.0.1:0"));
  EXPECT_TRUE(IsLoopbackListen("127.3.2.1:7000"));
  EXPECT_TRUE(IsLoopbackListen("localhost:7000"));
  EXPECT_TRUE(IsLoopbackListen("[::1]:7000"));
  EXPECT_FALSE(IsLoopbackListen("0.0.0.0:7000"));
  EXPECT_FALSE(IsLoopbackListen("[::]:7000"));
  EXPECT_FALSE(IsLoopbackListen("10.0.0.5:7000"));
}

TEST(TlsTest, FlagsSayWhatToPass) {
  auto none = LoadProcessSecurity({}, "stage_worker");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("--tls_dir DIR"), std::string::npos) << none.status();
  EXPECT_NE(none.status().message().find("--insecure"), std::string::npos) << none.status();
  TlsFlagValues both;
  both.dir = "/x";
  both.insecure = true;
  EXPECT_EQ(LoadProcessSecurity(both, "p").status().code(), absl::StatusCode::kInvalidArgument);
  TlsFlagValues missing;
  missing.dir = "/nonexistent/tls";
  auto m = LoadProcessSecurity(missing, "p");
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("/nonexistent/tls/ca.crt"), std::string::npos) << m.status();
  TlsFlagValues insecure;
  insecure.insecure = true;
  auto i = LoadProcessSecurity(insecure, "p");
  ASSERT_TRUE(i.ok());
  EXPECT_TRUE(i->insecure);
  EXPECT_EQ(SecurityArgs(*i), std::vector<std::string>{"--insecure"});
}

// A real gRPC server on certificates made here, and real clients: ours connects, others are refused.
TEST(TlsTest, MutualTlsAcceptsOurCaOnly) {
  const std::string dir = test_util::MakeTempDir("tls");
  auto ca = MakeCertificateAuthority("test CA", absl::Hours(1));
  ASSERT_TRUE(ca.ok()) << ca.status();
  auto server_cert = IssueCertificate(*ca, {"127.0.0.1"}, absl::Hours(1));
  auto client_cert = IssueCertificate(*ca, {"client"}, absl::Hours(1));
  ASSERT_TRUE(server_cert.ok() && client_cert.ok());
  auto other_ca = MakeCertificateAuthority("other CA", absl::Hours(1));
  ASSERT_TRUE(other_ca.ok());
  auto other_cert = IssueCertificate(*other_ca, {"client"}, absl::Hours(1));
  ASSERT_TRUE(other_cert.ok());
  ASSERT_TRUE(WritePrivateFile(JoinPath(dir, kTlsCaFile), ca->cert, 0644).ok());
  ASSERT_TRUE(WritePrivateFile(JoinPath(dir, kTlsCertFile), server_cert->cert, 0644).ok());
  ASSERT_TRUE(WritePrivateFile(JoinPath(dir, kTlsKeyFile), server_cert->key, 0600).ok());
  auto server_security = LoadTlsDir(dir);
  ASSERT_TRUE(server_security.ok()) << server_security.status();

  EnableHealthService();
  v1::StageService::Service stage;  // every method UNIMPLEMENTED; a sync server needs one service
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", PeerServerCredentials(*server_security), &port);
  builder.RegisterService(&stage);
  auto server = builder.BuildAndStart();
  ASSERT_TRUE(server && port > 0);
  MarkServing(*server, {});
  const std::string address = "127.0.0.1:" + std::to_string(port);
  auto ask = [&](const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
    return CheckHealth(address, "", absl::Seconds(5), credentials).status().code();
  };
  ProcessSecurity ours;
  ours.ca_pem = ca->cert;
  ours.cert_pem = client_cert->cert;
  ours.key_pem = client_cert->key;
  EXPECT_EQ(ask(PeerChannelCredentials(ours)), absl::StatusCode::kOk);
  ProcessSecurity theirs = ours;  // trusts our CA, but presents another CA's certificate
  theirs.cert_pem = other_cert->cert;
  theirs.key_pem = other_cert->key;
  EXPECT_EQ(ask(PeerChannelCredentials(theirs)), absl::StatusCode::kUnavailable);
  ProcessSecurity anonymous;  // trusts our CA, presents nothing
  anonymous.ca_pem = ca->cert;
  EXPECT_EQ(ask(PeerChannelCredentials(anonymous)), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ask(grpc::InsecureChannelCredentials()), absl::StatusCode::kUnavailable);
  ProcessSecurity fooled = ours;  // a client that does not trust our CA refuses our server
  fooled.ca_pem = other_ca->cert;
  EXPECT_EQ(ask(PeerChannelCredentials(fooled)), absl::StatusCode::kUnavailable);
  server->Shutdown();

  // A swapped key is refused when the files are read, naming them.
  ASSERT_TRUE(WritePrivateFile(JoinPath(dir, kTlsKeyFile), client_cert->key, 0600).ok());
  auto swapped = LoadTlsDir(dir);
  EXPECT_EQ(swapped.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(swapped.status().message().find("does not belong"), std::string::npos) << swapped.status();
}

// `baton certs --hosts stage-0.baton-stage+stage-1.baton-stage` (a StatefulSet's pods share one Secret): one
// certificate serves every pod's name, and no other.
TEST(TlsTest, OneCertificateServesEveryPodName) {
  auto ca = MakeCertificateAuthority("test CA", absl::Hours(1));
  ASSERT_TRUE(ca.ok()) << ca.status();
  auto pods = IssueCertificate(*ca, {"stage-0.baton-stage", "stage-1.baton-stage"}, absl::Hours(1));
  auto client = IssueCertificate(*ca, {"client"}, absl::Hours(1));
  ASSERT_TRUE(pods.ok() && client.ok());
  ProcessSecurity server_security;
  server_security.ca_pem = ca->cert;
  server_security.cert_pem = pods->cert;
  server_security.key_pem = pods->key;
  EnableHealthService();
  v1::StageService::Service stage;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", PeerServerCredentials(server_security), &port);
  builder.RegisterService(&stage);
  auto server = builder.BuildAndStart();
  ASSERT_TRUE(server && port > 0);
  MarkServing(*server, {});
  ProcessSecurity ours;
  ours.ca_pem = ca->cert;
  ours.cert_pem = client->cert;
  ours.key_pem = client->key;
  auto ask = [&](const std::string& name) {  // dial 127.0.0.1, check the certificate against `name`
    grpc::ChannelArguments args = MakeChannelArguments();
    args.SetSslTargetNameOverride(name);
    auto channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port), PeerChannelCredentials(ours), args);
    return CheckHealth(channel, name, "", absl::Seconds(5)).status().code();
  };
  EXPECT_EQ(ask("stage-0.baton-stage"), absl::StatusCode::kOk);
  EXPECT_EQ(ask("stage-1.baton-stage"), absl::StatusCode::kOk);
  EXPECT_EQ(ask("stage-2.baton-stage"), absl::StatusCode::kUnavailable);
  server->Shutdown();
}

}  // namespace
}  // namespace baton
