// Its own executable: it lowers the process's descriptor limit.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <vector>

#include "fedrt/transport/connection.h"
#include "fedrt/transport/tcp.h"
#include "net_test_support.h"

namespace fedrt {
namespace transport {
namespace {

using testing::Eventually;
using testing::Recorder;

TEST_CASE("the listener keeps accepting after the process runs out of file descriptors") {
  EventLoopThread loop;
  auto server = std::make_shared<Recorder>();
  ConnectionOptions options;
  options.heartbeat_interval_ms = 0;
  Result<std::shared_ptr<TcpListener>> listener = TcpListener::Listen(loop.loop(), "127.0.0.1", 0, options, server);
  REQUIRE(listener.ok());

  // The client's socket exists before the descriptors run out.
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(client >= 0);

  rlimit original{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &original) == 0);
  rlimit lowered = original;
  lowered.rlim_cur = 256;
  if (lowered.rlim_cur > original.rlim_cur) lowered.rlim_cur = original.rlim_cur;
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &lowered) == 0);
  std::vector<int> hogs;
  for (;;) {
    const int fd = ::open("/dev/null", O_RDONLY);
    if (fd < 0) break;
    hogs.push_back(fd);
  }
  CHECK(errno == EMFILE);

  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons((*listener)->port());
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(client, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);

  const bool exhausted = Eventually([&] { return (*listener)->stats().descriptor_exhaustions >= 1; }, 5000);
  CHECK(server->opened() == 0);
  for (int fd : hogs) ::close(fd);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &original) == 0);
  CHECK(exhausted);

  // Descriptors are back: the pending connection is accepted after the back-off.
  CHECK(Eventually([&] { return server->opened() == 1; }, 5000));
  CHECK((*listener)->stats().accepted == 1);
  ::close(client);
  CHECK(Eventually([&] { return server->closes_count() == 1; }, 5000));
}

}  // namespace
}  // namespace transport
}  // namespace fedrt
