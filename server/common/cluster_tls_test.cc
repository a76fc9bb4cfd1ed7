#include "server/common/cluster_tls.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "server/common/ephemeral_ca.h"
#include "tpserve/v1/worker.grpc.pb.h"

namespace tpserve {
namespace {

TEST(ClusterListenAddress, WithoutCredentialsOnlyLoopback) {
  EXPECT_EQ(ClusterListenAddress("0.0.0.0:7001", false, false), "127.0.0.1:7001");
  EXPECT_EQ(ClusterListenAddress("10.1.2.3:0", false, false), "127.0.0.1:0");
  EXPECT_EQ(ClusterListenAddress("[::]:7001", false, false), "127.0.0.1:7001");
  EXPECT_EQ(ClusterListenAddress("worker0:7001", false, false), "127.0.0.1:7001");
  EXPECT_EQ(ClusterListenAddress("127.0.0.1:7001", false, false), "127.0.0.1:7001");
  EXPECT_EQ(ClusterListenAddress("127.0.0.2:7001", false, false), "127.0.0.2:7001");
  EXPECT_EQ(ClusterListenAddress("[::1]:7001", false, false), "[::1]:7001");
  EXPECT_EQ(ClusterListenAddress("localhost:7001", false, false), "localhost:7001");
  EXPECT_EQ(ClusterListenAddress("0.0.0.0:7001", true, false), "0.0.0.0:7001");
  EXPECT_EQ(ClusterListenAddress("0.0.0.0:7001", false, true), "0.0.0.0:7001");
}

TEST(CheckClusterTls, AllThreeOrNone) {
  EXPECT_TRUE(CheckClusterTls({}).ok());
  ClusterTlsOptions some;
  some.ca_file = "/nonexistent/ca.pem";
  EXPECT_NE(CheckClusterTls(some).message().find("all three"), absl::string_view::npos);
  ClusterTlsOptions all{"/nonexistent/ca", "/nonexistent/cert", "/nonexistent/key"};
  EXPECT_NE(CheckClusterTls(all).message().find("--cluster_cert_file"), absl::string_view::npos);
}

// PEM text in a file of the test's temporary directory, removed at the end.
class PemFile {
 public:
  PemFile(const std::string& name, const std::string& text)
      : path_(absl::StrCat(::testing::TempDir(), "/cluster_tls_test.", getpid(), ".", name)) {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << text;
  }
  ~PemFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A worker port with cluster credentials (the Worker service answers UNIMPLEMENTED: reaching
// it at all means the handshake passed) and clients with various credentials.
class ClusterHandshake : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ca = EphemeralCa::Create("cluster CA", absl::Hours(1));
    auto foreign = EphemeralCa::Create("foreign CA", absl::Hours(1));
    ASSERT_TRUE(ca.ok() && foreign.ok());
    ca_ = *std::move(ca);
    foreign_ = *std::move(foreign);
    auto worker = ca_->Issue("worker", {"localhost"}, {"127.0.0.1"});
    ASSERT_TRUE(worker.ok()) << worker.status();
    ca_file_ = std::make_unique<PemFile>("ca.pem", ca_->cert_pem());
    cert_file_ = std::make_unique<PemFile>("cert.pem", worker->cert);
    key_file_ = std::make_unique<PemFile>("key.pem", worker->key);
    const ClusterTlsOptions files{ca_file_->path(), cert_file_->path(), key_file_->path()};
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
        MakeClusterServerCredentials(files);
    ASSERT_TRUE(credentials.ok()) << credentials.status();
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", *credentials, &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown(absl::ToChronoTime(absl::Now()));
  }

  // The status of a Session opened to `host`:port with `credentials`.
  grpc::StatusCode Call(const std::string& host,
                        const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
    auto stub = tpserve::v1::Worker::NewStub(
        grpc::CreateChannel(absl::StrCat(host, ":", port_), credentials));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    auto stream = stub->Session(&context);
    tpserve::v1::WorkerMessage reply;
    EXPECT_FALSE(stream->Read(&reply));
    return stream->Finish().error_code();
  }

  ClusterTlsPem Pem(const EphemeralCa& issuer, const EphemeralCa& trusted) {
    auto leaf = issuer.Issue("coordinator", {"localhost"}, {"127.0.0.1"});
    EXPECT_TRUE(leaf.ok()) << leaf.status();
    return {trusted.cert_pem(), leaf->cert, leaf->key};
  }

  std::unique_ptr<EphemeralCa> ca_, foreign_;
  std::unique_ptr<PemFile> ca_file_, cert_file_, key_file_;
  tpserve::v1::Worker::Service service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(ClusterHandshake, RightCertificateReachesTheService) {
  EXPECT_EQ(Call("127.0.0.1", MakeClusterChannelCredentials(Pem(*ca_, *ca_))),
            grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(Call("localhost", MakeClusterChannelCredentials(Pem(*ca_, *ca_))),
            grpc::StatusCode::UNIMPLEMENTED);
}

TEST_F(ClusterHandshake, FilesGiveTheSameCredentials) {
  const ClusterTlsOptions files{ca_file_->path(), cert_file_->path(), key_file_->path()};
  auto credentials = MakeClusterChannelCredentials(files);
  ASSERT_TRUE(credentials.ok()) << credentials.status();
  EXPECT_EQ(Call("127.0.0.1", *credentials), grpc::StatusCode::UNIMPLEMENTED);
}

TEST_F(ClusterHandshake, PlaintextNoCertificateAndForeignCaAreRefused) {
  EXPECT_EQ(Call("127.0.0.1", grpc::InsecureChannelCredentials()), grpc::StatusCode::UNAVAILABLE);
  grpc::SslCredentialsOptions no_cert;
  no_cert.pem_root_certs = ca_->cert_pem();
  EXPECT_EQ(Call("127.0.0.1", grpc::SslCredentials(no_cert)), grpc::StatusCode::UNAVAILABLE);
  // A client certificate from another CA (trusting the right one for the server).
  EXPECT_EQ(Call("127.0.0.1", MakeClusterChannelCredentials(Pem(*foreign_, *ca_))),
            grpc::StatusCode::UNAVAILABLE);
}

TEST_F(ClusterHandshake, CoordinatorRefusesAWorkerOfAnotherCaOrName) {
  // Trusting only the foreign CA, the worker's certificate does not verify.
  EXPECT_EQ(Call("127.0.0.1", MakeClusterChannelCredentials(Pem(*foreign_, *foreign_))),
            grpc::StatusCode::UNAVAILABLE);
  // The right CA, but a host name the worker's certificate does not carry.
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("not-the-worker.example");
  auto stub = tpserve::v1::Worker::NewStub(grpc::CreateCustomChannel(
      absl::StrCat("127.0.0.1:", port_), MakeClusterChannelCredentials(Pem(*ca_, *ca_)), args));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  auto stream = stub->Session(&context);
  tpserve::v1::WorkerMessage reply;
  EXPECT_FALSE(stream->Read(&reply));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace tpserve
