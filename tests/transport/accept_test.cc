// Its own executable: it lowers the process's descriptor limit.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "fedrt/platform/log.h"

#include "fedrt/transport/connection.h"
#include "fedrt/transport/tcp.h"
#include "net_test_support.h"

namespace fedrt {
namespace transport {
namespace {

using testing::Eventually;
using testing::Recorder;

// Set by the log hook when the listener reports the exhaustion. While no
// descriptor is free the test touches nothing that might need one (UBSan's
// type checks can open files), so it watches the log instead of the listener.
std::atomic<bool> backed_off{false};

void WatchLog(LogLevel, const char* message, void*) {
  if (std::strstr(message, "backing off") != nullptr) backed_off = true;
}

TEST_CASE("the listener keeps accepting after the process runs out of file descriptors") {
  SetLogHook(WatchLog, nullptr);
  EventLoopThread loop;
  auto server = std::make_shared<Recorder>();
  ConnectionOptions options;
  options.heartbeat_interval_ms = 0;
  Result<std::shared_ptr<TcpListener>> listener = TcpListener::Listen(loop.loop(), "127.0.0.1", 0, options, server);
  REQUIRE(listener.ok());

  // The client's socket exists before the descriptors run out.
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(client >= 0);

  REQUIRE(server->opened() == 0);  // also lets UBSan check this call while it can

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

  const bool exhausted = Eventually([] { return backed_off.load(); }, 5000);
  const std::size_t opened_while_exhausted = server->opened();
  for (int fd : hogs) ::close(fd);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &original) == 0);
  SetLogHook(nullptr, nullptr);
  CHECK(exhausted);
  CHECK(opened_while_exhausted == 0);
  CHECK((*listener)->stats().descriptor_exhaustions >= 1);

  // Descriptors are back: the pending connection is accepted after the back-off.
  CHECK(Eventually([&] { return server->opened() == 1; }, 5000));
  CHECK((*listener)->stats().accepted == 1);
  ::close(client);
  CHECK(Eventually([&] { return server->closes_count() == 1; }, 5000));
}

}  // namespace
}  // namespace transport
}  // namespace fedrt
