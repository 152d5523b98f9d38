// The kernel shaper of `fedrt sim` (runtime/cli/kernel_links.h): a device
// namespace joined to this one by a veth pair and shaped with tc carries n
// bytes in n over the rate within 10%, both ways, and everything the run
// created is gone afterwards. Needs root and `ip netns`; says why and
// passes without checking anything when it cannot run.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "cli/kernel_links.h"
#include "fedrt/transport/link_profile.h"

namespace fedrt::cli {
namespace {

constexpr std::size_t kBytes = 256u << 10;
constexpr double kRate = 4e6;

bool SendAll(int fd, std::size_t bytes) {
  std::vector<char> buffer(16384, 'x');
  while (bytes > 0) {
    const ssize_t n = ::send(fd, buffer.data(), std::min(bytes, buffer.size()), MSG_NOSIGNAL);
    if (n <= 0) return false;
    bytes -= static_cast<std::size_t>(n);
  }
  return true;
}

bool ReceiveAll(int fd, std::size_t bytes) {
  std::vector<char> buffer(65536);
  while (bytes > 0) {
    const ssize_t n = ::recv(fd, buffer.data(), std::min(bytes, buffer.size()), 0);
    if (n <= 0) return false;
    bytes -= static_cast<std::size_t>(n);
  }
  return true;
}

// A TCP socket made inside namespace `name` (a socket stays in the namespace
// it was made in; only this thread moves, and it is a thread of its own).
int SocketIn(const std::string& name) {
  int fd = -1;
  std::thread maker([&] {
    const int ns = ::open(("/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0) return;
    if (::setns(ns, CLONE_NEWNET) == 0) fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ::close(ns);
  });
  maker.join();
  return fd;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST_CASE("the kernel shaper carries n bytes in n over the rate within 10% up and down and removes its links") {
  Result<transport::LinkProfile> profile = transport::ParseLinkProfile("4mbit");
  REQUIRE(profile.ok());
  const Status available = KernelLinks::Available({*profile});
  if (!available.ok()) {
    MESSAGE("skipped: the kernel shaper is not available here: " << available.ToString());
    return;
  }
  std::string ns, bridge;
  {
    Result<std::unique_ptr<KernelLinks>> links = KernelLinks::Create({*profile});
    REQUIRE_MESSAGE(links.ok(), links.status().ToString());
    ns = (*links)->netns(0);
    bridge = "fr" + std::to_string(::getpid()) + "b";
    struct stat st;
    CHECK(::stat(("/run/netns/" + ns).c_str(), &st) == 0);

    const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listener >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = 0;
    REQUIRE(::inet_pton(AF_INET, (*links)->host_address().c_str(), &address.sin_addr) == 1);
    REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
    REQUIRE(::listen(listener, 1) == 0);
    socklen_t length = sizeof(address);
    REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) == 0);

    const int device = SocketIn(ns);
    REQUIRE(device >= 0);
    REQUIRE(::connect(device, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
    const int host = ::accept(listener, nullptr, nullptr);
    REQUIRE(host >= 0);
    const double expected = static_cast<double>(kBytes) * 8 / kRate;

    // Uplink: the device's end of the veth pair.
    auto start = std::chrono::steady_clock::now();
    std::thread sender([&] { SendAll(device, kBytes); });
    CHECK(ReceiveAll(host, kBytes));
    const double up = SecondsSince(start);
    sender.join();
    MESSAGE("uplink: " << kBytes << " bytes in " << up << " s, expected " << expected << " s");
    CHECK(up == doctest::Approx(expected).epsilon(0.10));

    // Downlink: the bridge's end.
    start = std::chrono::steady_clock::now();
    std::thread receiver([&] { CHECK(ReceiveAll(device, kBytes)); });
    CHECK(SendAll(host, kBytes));
    receiver.join();
    const double down = SecondsSince(start);
    MESSAGE("downlink: " << kBytes << " bytes in " << down << " s, expected " << expected << " s");
    CHECK(down == doctest::Approx(expected).epsilon(0.10));
    ::close(device);
    ::close(host);
    ::close(listener);
  }
  struct stat st;
  CHECK(::stat(("/run/netns/" + ns).c_str(), &st) != 0);
  CHECK(!RunTool({"ip", "link", "show", bridge}).ok());
}

// Whatever this machine can do (no root; root without sch_netem, as here;
// root with it), every part of a profile is shaped by exactly one shaper,
// and the note says which.
TEST_CASE("the shaper plan gives the rate and the delay each to one shaper and says which") {
  Result<transport::LinkProfile> profile = transport::ParseLinkProfile("4mbit,delay=50ms");
  REQUIRE(profile.ok());
  const std::vector<transport::LinkProfile> profiles = {*profile, *profile};
  {
    Result<ShaperPlan> plan = PlanShapers(profiles, "auto", "device");
    REQUIRE_MESSAGE(plan.ok(), plan.status().ToString());
    MESSAGE("auto: " << plan->note);
    REQUIRE(plan->user.size() == 2);
    for (const transport::LinkProfile& user : plan->user) {
      if (!plan->kernel) {  // user space does everything
        CHECK(user.up_bits_per_second == 4000000);
        CHECK(user.down_bits_per_second == 4000000);
        CHECK(user.delay_ms == 50);
        CHECK(plan->note.rfind("user space (the kernel cannot: ", 0) == 0);
      } else if (user.shaped()) {  // the kernel the rate, user space the delay
        CHECK(user.up_bits_per_second == 0);
        CHECK(user.down_bits_per_second == 0);
        CHECK(user.delay_ms == 50);
        CHECK(transport::FormatLinkProfile(user) == "unlimited,delay=50ms");
        CHECK(plan->note.find("kernel for the rate (tc on a veth pair per device") == 0);
        CHECK(plan->note.find("user space for the delay (the kernel cannot: sch_netem") != std::string::npos);
      } else {  // the kernel everything
        CHECK(plan->note.rfind("kernel (", 0) == 0);
      }
    }
    // The plain rate never needs user space where the kernel shapes.
    if (plan->kernel) {
      plan->kernel.reset();
      Result<ShaperPlan> rate = PlanShapers({*transport::ParseLinkProfile("4mbit")}, "auto", "device");
      REQUIRE(rate.ok());
      CHECK(rate->kernel != nullptr);
      CHECK(!rate->user[0].shaped());
    }
  }
  Result<ShaperPlan> user = PlanShapers(profiles, "user", "peer");
  REQUIRE(user.ok());
  CHECK(user->kernel == nullptr);
  CHECK(user->user[1].up_bits_per_second == 4000000);
  CHECK(user->user[1].delay_ms == 50);
  CHECK(user->note == "user space (the kernel cannot: --shaper user)");
  // --shaper kernel takes nothing less than the whole profile.
  const Status kernel_can = KernelLinks::Available(profiles);
  Result<ShaperPlan> kernel = PlanShapers(profiles, "kernel", "device");
  CHECK(kernel.ok() == kernel_can.ok());
  if (!kernel.ok()) CHECK(kernel.status().message().find("--shaper auto") != std::string::npos);
}

TEST_CASE("the kernel shaper refuses more devices than its subnet holds") {
  std::vector<transport::LinkProfile> many(251, *transport::ParseLinkProfile("1mbit"));
  CHECK(KernelLinks::Available(many).code() == StatusCode::kUnavailable);
  CHECK(KernelLinks::Create(many).status().code() == StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fedrt::cli
