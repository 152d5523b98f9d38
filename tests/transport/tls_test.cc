// TLS on TCP connections: credentials, round trips, what is refused and how
// a TLS listener keeps serving others.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "fedrt/transport/chunking.h"
#include "fedrt/transport/connection.h"
#include "fedrt/transport/messages.h"
#include "fedrt/transport/tcp.h"
#include "fedrt/transport/tls.h"
#include "net_test_support.h"
#include "tls_test_support.h"

namespace fedrt {
namespace transport {
namespace {

using testing::AckFrame;
using testing::EchoServer;
using testing::Eventually;
using testing::RawClient;
using testing::Recorder;
using testing::TlsCredentials;

constexpr uint32_t kWait = 30000;  // an upper bound only: cross builds run under qemu

ConnectionOptions Options(std::shared_ptr<const TlsContext> tls) {
  ConnectionOptions options;
  options.io_timeout_ms = 5000;
  options.idle_timeout_ms = 10000;
  options.heartbeat_interval_ms = 0;
  options.tls = std::move(tls);
  return options;
}

// An echo server on 127.0.0.1 (TLS with `tls`, plain with null) and its
// clients.
struct EchoListener {
  EventLoopThread loop;
  std::shared_ptr<Recorder> server = EchoServer();
  std::shared_ptr<TcpListener> listener;

  explicit EchoListener(std::shared_ptr<const TlsContext> tls, uint32_t io_timeout_ms = 5000) {
    ConnectionOptions options = Options(std::move(tls));
    options.io_timeout_ms = io_timeout_ms;
    Result<std::shared_ptr<TcpListener>> listening =
        TcpListener::Listen(loop.loop(), "127.0.0.1", 0, options, server);
    REQUIRE(listening.ok());
    listener = *listening;
  }
  Result<std::shared_ptr<Connection>> Dial(std::shared_ptr<const TlsContext> tls,
                                           const std::shared_ptr<FrameQueue>& queue, uint32_t timeout_ms = kWait) {
    return TcpConnectAndWait(loop.loop(), "127.0.0.1", listener->port(), Options(std::move(tls)), queue,
                             timeout_ms);
  }
  uint16_t port() const { return listener->port(); }
  bool FailuresReach(uint64_t n) {
    return Eventually([&] { return listener->stats().tls_handshake_failures == n; }, kWait);
  }
};

// One Ack out and its echo back; the round id checked.
void RoundTrip(Connection& connection, FrameQueue& queue, uint64_t round) {
  REQUIRE(connection.Send(AckFrame(round)).ok());
  Result<Frame> echo = queue.Pop(kWait);
  REQUIRE(echo.ok());
  CHECK(DecodeAck(*echo)->round_id == round);
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

TEST_CASE("tls credentials made at test time load as server and client contexts") {
  TlsCredentials credentials;
  REQUIRE(credentials.ok());
  CHECK(TlsSupported());
  std::shared_ptr<const TlsContext> server = credentials.Server();
  REQUIRE(server != nullptr);
  CHECK(server->can_listen());
  CHECK_FALSE(server->can_dial());
  std::shared_ptr<const TlsContext> client = credentials.Client();
  REQUIRE(client != nullptr);
  CHECK(client->can_dial());
  CHECK_FALSE(client->can_listen());
  struct stat info {};
  REQUIRE(::stat(credentials.files().server_key.c_str(), &info) == 0);
  CHECK((info.st_mode & 0077) == 0);
}

TEST_CASE("tls contexts name the file that is missing unreadable or does not match") {
  TlsCredentials credentials;
  REQUIRE(credentials.ok());
  TlsConfig config = credentials.ServerConfig();
  config.cert_file = credentials.File("absent.pem");
  Result<std::shared_ptr<const TlsContext>> missing = TlsContext::Create(config);
  CHECK(missing.status().code() == StatusCode::kNotFound);
  CHECK(missing.status().message().find("absent.pem") != std::string::npos);

  const std::string garbage = credentials.File("garbage.pem");
  WriteText(garbage, "this is not a certificate\n");
  config = credentials.ServerConfig();
  config.cert_file = garbage;
  Result<std::shared_ptr<const TlsContext>> not_pem = TlsContext::Create(config);
  CHECK(not_pem.status().code() == StatusCode::kInvalidArgument);
  CHECK(not_pem.status().message().find("garbage.pem") != std::string::npos);

  config = credentials.ServerConfig();
  config.key_file = credentials.files().client_key;  // another key
  Result<std::shared_ptr<const TlsContext>> mismatch = TlsContext::Create(config);
  CHECK(mismatch.status().code() == StatusCode::kInvalidArgument);
  CHECK(mismatch.status().message().find("does not match") != std::string::npos);

  const std::string cert_as_key = credentials.File("cert-as-key.pem");
  WriteText(cert_as_key, fedrt::testing::ReadFileBytes(credentials.files().server_cert));
  REQUIRE(::chmod(cert_as_key.c_str(), 0600) == 0);
  config = credentials.ServerConfig();
  config.key_file = cert_as_key;  // a certificate, no key
  Result<std::shared_ptr<const TlsContext>> no_key = TlsContext::Create(config);
  CHECK(no_key.status().code() == StatusCode::kInvalidArgument);
  CHECK(no_key.status().message().find("no PEM private key") != std::string::npos);

  config = credentials.ClientConfig();
  config.ca_file = garbage;
  Result<std::shared_ptr<const TlsContext>> bad_ca = TlsContext::Create(config);
  CHECK(bad_ca.status().code() == StatusCode::kInvalidArgument);
  CHECK(bad_ca.status().message().find("CA file") != std::string::npos);

  REQUIRE(::chmod(credentials.files().server_key.c_str(), 0644) == 0);
  Result<std::shared_ptr<const TlsContext>> readable = TlsContext::Create(credentials.ServerConfig());
  CHECK(readable.status().code() == StatusCode::kFailedPrecondition);
  CHECK(readable.status().message().find(credentials.files().server_key) != std::string::npos);

  CHECK(TlsContext::Create(TlsConfig()).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("a tls listener needs a certificate and a tls client needs a ca file") {
  TlsCredentials credentials;
  REQUIRE(credentials.ok());
  EchoListener echo(credentials.Server());
  CHECK(TcpListener::Listen(echo.loop.loop(), "127.0.0.1", 0, Options(credentials.Client()), echo.server)
            .status()
            .code() == StatusCode::kInvalidArgument);
  auto client = std::make_shared<FrameQueue>();
  CHECK(echo.Dial(credentials.Server(), client).status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("tls connections carry small and chunked large frames in both directions and close gracefully") {
  TlsCredentials credentials;
  REQUIRE(credentials.ok());
  EventLoopThread loop;
  ConnectionOptions server_options = Options(credentials.Server());
  ConnectionOptions client_options = Options(credentials.Client());
  // Small frames keep the run short under emulation (software AES) while the
  // payload still spans several frames and many TLS records.
  server_options.limits.max_frame_bytes = client_options.limits.max_frame_bytes = 128u << 10;
  server_options.io_timeout_ms = client_options.io_timeout_ms = 30000;
  std::vector<uint8_t> payload(700'001);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 131u + 7u);
  auto reassembler = std::make_shared<Reassembler>(server_options.limits.max_payload_bytes);
  auto server = EchoServer();
  auto echo = server->on_frame;
  server->on_frame = [&, reassembler, echo](Connection& connection, const Frame& frame) {
    if (frame.kind() != MessageKind::kUpdate) return echo(connection, frame);
    Result<UpdateMessage> update = DecodeUpdate(frame, server_options.limits);
    if (update.ok() && reassembler->Add(update->payload).ok() && reassembler->complete()) {
      (void)connection.Send(AckFrame(update->round_id));
    }
  };
  Result<std::shared_ptr<TcpListener>> listener =
      TcpListener::Listen(loop.loop(), "127.0.0.1", 0, server_options, server);
  REQUIRE(listener.ok());
  auto client = std::make_shared<FrameQueue>();
  Result<std::shared_ptr<Connection>> connection =
      TcpConnectAndWait(loop.loop(), "127.0.0.1", (*listener)->port(), client_options, client, kWait);
  REQUIRE(connection.ok());
  for (uint64_t i = 0; i < 20; ++i) RoundTrip(**connection, *client, i);

  REQUIRE(testing::SendChunkedUpdate(**connection, 77, payload, client_options.limits).ok());
  Result<Frame> ack = client->Pop(kWait);
  REQUIRE(ack.ok());
  CHECK(DecodeAck(*ack)->round_id == 77);
  REQUIRE(reassembler->complete());
  CHECK(std::memcmp(reassembler->data(), payload.data(), payload.size()) == 0);

  (*connection)->Close();
  CHECK(client->WaitClosed(kWait));
  CHECK(client->close_reason().ok());
  REQUIRE(Eventually([&] { return server->closes_count() == 1; }, kWait));
  CHECK(server->closes()[0].code() == StatusCode::kUnavailable);  // the peer closed
  CHECK((*listener)->stats().tls_handshake_failures == 0);
}

TEST_CASE("a tls client verifies the name it dialled or the server name it was given") {
  TlsCredentials credentials;
  REQUIRE(credentials.ok());
  EchoListener echo(credentials.Server());
  TlsConfig by_dns = credentials.ClientConfig();
  by_dns.server_name = "localhost";
  auto good = std::make_shared<FrameQueue>();
  Result<std::shared_ptr<Connection>> connection = echo.Dial(TlsCredentials::Make(by_dns), good);
  REQUIRE(connection.ok());
  RoundTrip(**connection, *good, 5);
  (*connection)->Close();

  TlsConfig other = credentials.ClientConfig();
  other.server_name = "aggregator.example";
  auto refused = std::make_shared<FrameQueue>();
  Result<std::shared_ptr<Connection>> wrong_name = echo.Dial(TlsCredentials::Make(other), refused);
  REQUIRE_FALSE(wrong_name.ok());
  CHECK(wrong_name.status().code() == StatusCode::kUnauthenticated);
  CHECK(wrong_name.status().message().find("certificate verify failed") != std::string::npos);
  CHECK(echo.FailuresReach(1));
  CHECK(echo.server->opened() == 1);
}

TEST_CASE("a tls client refuses a server whose certificate another ca signed") {
  TlsCredentials credentials;
  TlsCredentials strangers;
  REQUIRE(credentials.ok());
  REQUIRE(strangers.ok());
  EchoListener echo(strangers.Server());
  auto client = std::make_shared<FrameQueue>();
  Result<std::shared_ptr<Connection>> connection = echo.Dial(credentials.Client(), client);
  REQUIRE_FALSE(connection.ok());
  CHECK(connection.status().code() == StatusCode::kUnauthenticated);
  CHECK(connection.status().message().find("TLS handshake with 127.0.0.1:") != std::string::npos);
  CHECK(connection.status().message().find("certificate verify failed") != std::string::npos);
  CHECK(echo.FailuresReach(1));
  CHECK(echo.server->opened() == 0);
}

TEST_CASE("a plain client is refused by a tls server while a tls client on the same listener completes") {
  TlsCredentials credentials;
  REQUIRE(credentials.ok());
  EchoListener echo(credentials.Server());
  auto tls_client = std::make_shared<FrameQueue>();
  Result<std::shared_ptr<Connection>> tls_connection = echo.Dial(credentials.Client(), tls_client);
  REQUIRE(tls_connection.ok());

  auto plain_client = std::make_shared<FrameQueue>();
  Result<std::shared_ptr<Connection>> plain_connection = echo.Dial(nullptr, plain_client);
  REQUIRE(plain_connection.ok());  // TCP connects; the first frame fails the handshake
  REQUIRE((*plain_connection)->Send(AckFrame(1)).ok());
  REQUIRE(plain_client->WaitClosed(kWait));
  CHECK_FALSE(plain_client->close_reason().ok());
  CHECK_FALSE(plain_client->Pop(0).ok());  // nothing was answered
  REQUIRE(echo.FailuresReach(1));

  RoundTrip(**tls_connection, *tls_client, 42);
  CHECK(echo.server->opened() == 1);
  (*tls_connection)->Close();
  CHECK(tls_client->WaitClosed(kWait));
}

TEST_CASE("a tls client to a plain server fails with a handshake error before its deadline") {
  TlsCredentials credentials;
  REQUIRE(credentials.ok());
  EchoListener echo(nullptr);
  auto client = std::make_shared<FrameQueue>();
  Result<std::shared_ptr<Connection>> connection = echo.Dial(credentials.Client(), client, 60000);
  REQUIRE_FALSE(connection.ok());
  // Refused by what the plain server answered, not by the (long) deadline.
  CHECK(connection.status().code() == StatusCode::kUnavailable);
  CHECK(connection.status().message().find("TLS handshake with 127.0.0.1:") != std::string::npos);
  // The plain server saw a bad frame prefix and closed only that connection.
  REQUIRE(Eventually([&] { return echo.server->closes_count() == 1; }, kWait));
  CHECK_FALSE(echo.server->closes()[0].ok());
}

TEST_CASE("a client that connects to a tls server and sends nothing is closed at the handshake deadline") {
  TlsCredentials credentials;
  REQUIRE(credentials.ok());
  EchoListener echo(credentials.Server(), /*io_timeout_ms=*/200);
  RawClient silent(echo.port());
  REQUIRE(silent.connected());
  REQUIRE(echo.FailuresReach(1));
  CHECK(echo.server->opened() == 0);

  RawClient garbage(echo.port());
  REQUIRE(garbage.connected());
  REQUIRE(garbage.Write(std::vector<uint8_t>(64, 0x5a)));
  REQUIRE(echo.FailuresReach(2));
  CHECK(echo.server->opened() == 0);
}

TEST_CASE("mutual tls accepts a client with a certificate of the ca and refuses one without") {
  TlsCredentials credentials;
  REQUIRE(credentials.ok());
  TlsConfig server_config = credentials.ServerConfig();
  server_config.ca_file = credentials.files().ca_cert;
  EchoListener echo(TlsCredentials::Make(server_config));

  TlsConfig with_cert = credentials.ClientConfig();
  with_cert.cert_file = credentials.files().client_cert;
  with_cert.key_file = credentials.files().client_key;
  auto good = std::make_shared<FrameQueue>();
  Result<std::shared_ptr<Connection>> connection = echo.Dial(TlsCredentials::Make(with_cert), good);
  REQUIRE(connection.ok());
  RoundTrip(**connection, *good, 3);

  // TLS 1.3 lets the client finish its handshake before the server checks the
  // client's certificate: the refusal arrives as an alert on the connection.
  auto anonymous = std::make_shared<FrameQueue>();
  Result<std::shared_ptr<Connection>> refused = echo.Dial(credentials.Client(), anonymous);
  if (refused.ok()) {
    (void)(*refused)->Send(AckFrame(4));
    CHECK_FALSE(anonymous->Pop(kWait).ok());
  }
  REQUIRE(echo.FailuresReach(1));
  CHECK(echo.server->opened() == 1);
  (*connection)->Close();
  CHECK(good->WaitClosed(kWait));
}

}  // namespace
}  // namespace transport
}  // namespace fedrt
