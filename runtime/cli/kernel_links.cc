// Namespaces, veth pairs, a bridge and tc qdiscs for `fedrt sim`'s kernel
// shaper (contract in kernel_links.h).
#include "cli/kernel_links.h"

#include <dirent.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

extern char** environ;

namespace fedrt::cli {
namespace {

using transport::LinkProfile;

constexpr int kMaxKernelLinks = 250;  // addresses .2 .. .251 of the run's /24

std::string Pid() { return std::to_string(::getpid()); }

// tc's qdiscs for one direction: netem (delay, loss) with tbf (rate) below
// it, or tbf alone. tbf's bucket must hold a whole packet or it drops every
// packet larger than the bucket; the queue holds half a second of traffic so
// that TCP sees a slow link, not a lossy one.
std::vector<std::vector<std::string>> QdiscCommands(const std::string& device, const std::string& namespace_name,
                                                    uint64_t bits_per_second, const LinkProfile& profile) {
  std::vector<std::string> tc = {"tc"};
  if (!namespace_name.empty()) tc = {"tc", "-n", namespace_name};
  std::vector<std::vector<std::string>> commands;
  std::vector<std::string> parent = {"root"};
  if (profile.delay_ms != 0 || profile.loss > 0) {
    std::vector<std::string> netem = tc;
    for (const char* word : {"qdisc", "add", "dev"}) netem.push_back(word);
    netem.push_back(device);
    for (const char* word : {"root", "handle", "1:", "netem"}) netem.push_back(word);
    if (profile.delay_ms != 0) {
      netem.push_back("delay");
      netem.push_back(std::to_string(profile.delay_ms) + "ms");
    }
    if (profile.loss > 0) {
      char loss[32];
      std::snprintf(loss, sizeof(loss), "%.4f%%", profile.loss * 100);
      netem.push_back("loss");
      netem.push_back(loss);
    }
    commands.push_back(netem);
    parent = {"parent", "1:1", "handle", "10:"};
  }
  if (bits_per_second != 0) {
    const uint64_t bytes_per_second = bits_per_second / 8;
    const uint64_t burst = std::max<uint64_t>(transport::kLinkBurstBytes, bytes_per_second / 250);
    const uint64_t limit = std::max<uint64_t>(256u << 10, bytes_per_second / 2);
    std::vector<std::string> tbf = tc;
    for (const char* word : {"qdisc", "add", "dev"}) tbf.push_back(word);
    tbf.push_back(device);
    tbf.insert(tbf.end(), parent.begin(), parent.end());
    for (const std::string& word : {std::string("tbf"), std::string("rate"), std::to_string(bits_per_second) + "bit",
                                    std::string("burst"), std::to_string(burst), std::string("limit"),
                                    std::to_string(limit)}) {
      tbf.push_back(word);
    }
    commands.push_back(tbf);
  }
  return commands;
}

// Namespaces and bridges of earlier runs whose process is gone (killed
// with SIGKILL: nothing could remove them).
void RemoveStale() {
  DIR* dir = ::opendir("/run/netns");
  if (dir != nullptr) {
    std::vector<std::string> stale;
    while (struct dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      if (name.rfind("fedrt-", 0) != 0) continue;
      const long pid = std::strtol(name.c_str() + 6, nullptr, 10);
      if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) stale.push_back(name);
    }
    ::closedir(dir);
    for (const std::string& name : stale) (void)RunTool({"ip", "netns", "del", name});
  }
  Result<std::string> links = RunTool({"ip", "-o", "link", "show", "type", "bridge"});
  if (!links.ok()) return;
  std::size_t at = 0;
  while ((at = links->find(": fr", at)) != std::string::npos) {
    at += 2;
    const std::size_t end = links->find_first_of(":@ ", at);
    const std::string name = links->substr(at, end == std::string::npos ? std::string::npos : end - at);
    char* digits_end = nullptr;
    const long pid = std::strtol(name.c_str() + 2, &digits_end, 10);
    if (pid > 0 && std::string(digits_end) == "b" && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      (void)RunTool({"ip", "link", "del", name});
    }
  }
}

}  // namespace

Result<std::string> RunTool(const std::vector<std::string>& args) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return Status(StatusCode::kUnavailable, "pipe failed");
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 2);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[1]);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  std::string output;
  if (rc == 0) {
    char buffer[512];
    ssize_t n = 0;
    while ((n = ::read(pipe_fds[0], buffer, sizeof(buffer))) > 0 || (n < 0 && errno == EINTR)) {
      if (n > 0) output.append(buffer, static_cast<std::size_t>(n));
    }
  }
  ::close(pipe_fds[0]);
  std::string command;
  for (const std::string& a : args) command += (command.empty() ? "" : " ") + a;
  if (rc != 0) return Status(StatusCode::kUnavailable, "cannot run " + args[0] + " (is iproute2 installed?)");
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
    return Status(StatusCode::kUnavailable, "`" + command + "` failed: " + output);
  }
  return output;
}

Status KernelLinks::Available(const std::vector<LinkProfile>& profiles) {
  if (::geteuid() != 0) return Status(StatusCode::kUnavailable, "not root");
  if (profiles.size() > kMaxKernelLinks) {
    return Status(StatusCode::kUnavailable, "more than " + std::to_string(kMaxKernelLinks) + " devices");
  }
  Result<std::string> netns = RunTool({"ip", "netns", "list"});
  if (!netns.ok()) return Status(StatusCode::kUnavailable, "no `ip netns`: " + netns.status().message());
  bool netem = false;
  for (const LinkProfile& p : profiles) netem = netem || p.delay_ms != 0 || p.loss > 0;
  // Probe the qdiscs on a veth pair of our own: a kernel without sch_netem
  // (or sch_tbf) refuses the qdisc by name.
  const std::string a = "fr" + Pid() + "p0", b = "fr" + Pid() + "p1";
  Result<std::string> made = RunTool({"ip", "link", "add", a, "type", "veth", "peer", "name", b});
  if (!made.ok()) return Status(StatusCode::kUnavailable, "no veth pairs: " + made.status().message());
  Status status;
  LinkProfile probe;
  probe.delay_ms = netem ? 1 : 0;
  for (const std::vector<std::string>& command : QdiscCommands(a, "", 1000000, probe)) {
    Result<std::string> added = RunTool(command);
    if (!added.ok()) {
      status = Status(StatusCode::kUnavailable,
                      std::string(std::find(command.begin(), command.end(), "netem") != command.end() ? "sch_netem" : "sch_tbf") +
                          " is missing in this kernel (" + added.status().message() + ")");
      break;
    }
  }
  (void)RunTool({"ip", "link", "del", a});
  return status;
}

Result<std::unique_ptr<KernelLinks>> KernelLinks::Create(const std::vector<LinkProfile>& profiles) {
  if (profiles.empty() || profiles.size() > kMaxKernelLinks) {
    return InvalidArgument("the kernel shaper takes 1 to " + std::to_string(kMaxKernelLinks) + " devices");
  }
  RemoveStale();
  std::unique_ptr<KernelLinks> links(new KernelLinks());
  // A /24 of the shared address space that no interface here uses.
  Result<std::string> used = RunTool({"ip", "-o", "-4", "addr", "show"});
  if (!used.ok()) return used.status();
  const int base = ::getpid() % 16384;
  for (int k = 0; k < 16384 && links->prefix_.empty(); ++k) {
    const int slot = (base + k) % 16384;
    const std::string prefix = "100." + std::to_string(64 + slot / 256) + "." + std::to_string(slot % 256) + ".";
    if (used->find(" " + prefix) == std::string::npos) links->prefix_ = prefix;
  }
  if (links->prefix_.empty()) return Status(StatusCode::kUnavailable, "no free /24 in 100.64.0.0/10");
  links->host_address_ = links->prefix_ + "1";
  const std::string pid = Pid();
  links->bridge_ = "fr" + pid + "b";
  const auto run = [](std::vector<std::string> args) { return RunTool(args).status(); };
  // Frames between two ports (peer to peer) would otherwise cross the
  // host's iptables FORWARD chain where br_netfilter is loaded, which a
  // container host often drops; frames to the bridge's own address are not
  // affected either way.
  if (!RunTool({"ip", "link", "add", links->bridge_, "type", "bridge", "nf_call_iptables", "0", "nf_call_ip6tables",
                "0", "nf_call_arptables", "0"})
           .ok()) {
    FEDRT_RETURN_IF_ERROR(run({"ip", "link", "add", links->bridge_, "type", "bridge"}));
  }
  FEDRT_RETURN_IF_ERROR(run({"ip", "addr", "add", links->host_address_ + "/24", "dev", links->bridge_}));
  FEDRT_RETURN_IF_ERROR(run({"ip", "link", "set", links->bridge_, "up"}));
  for (std::size_t i = 0; i < profiles.size(); ++i) {
    const std::string ns = "fedrt-" + pid + "-" + std::to_string(i);
    const std::string host = "fr" + pid + "h" + std::to_string(i);
    const std::string device = "fr" + pid + "d" + std::to_string(i);
    FEDRT_RETURN_IF_ERROR(run({"ip", "netns", "add", ns}));
    links->namespaces_.push_back(ns);
    FEDRT_RETURN_IF_ERROR(run({"ip", "link", "add", host, "type", "veth", "peer", "name", device, "netns", ns}));
    links->host_ends_.push_back(host);
    FEDRT_RETURN_IF_ERROR(run({"ip", "link", "set", host, "master", links->bridge_}));
    FEDRT_RETURN_IF_ERROR(run({"ip", "link", "set", host, "up"}));
    FEDRT_RETURN_IF_ERROR(
        run({"ip", "-n", ns, "addr", "add", links->device_address(static_cast<int>(i)) + "/24", "dev", device}));
    FEDRT_RETURN_IF_ERROR(run({"ip", "-n", ns, "link", "set", "lo", "up"}));
    FEDRT_RETURN_IF_ERROR(run({"ip", "-n", ns, "link", "set", device, "up"}));
    // The device's uplink leaves through its end, the downlink through the
    // bridge's.
    FEDRT_RETURN_IF_ERROR(links->Shape(device, ns, profiles[i].up_bits_per_second, profiles[i]));
    FEDRT_RETURN_IF_ERROR(links->Shape(host, "", profiles[i].down_bits_per_second, profiles[i]));
  }
  return links;
}

Status KernelLinks::Shape(const std::string& device, const std::string& namespace_name, uint64_t bits_per_second,
                          const LinkProfile& profile) {
  for (const std::vector<std::string>& command : QdiscCommands(device, namespace_name, bits_per_second, profile)) {
    FEDRT_RETURN_IF_ERROR(RunTool(command).status());
  }
  return Status::Ok();
}

std::string KernelLinks::device_address(int i) const { return prefix_ + std::to_string(i + 2); }

void KernelLinks::Remove() {
  // Deleting a namespace deletes the veth end in it, and with it the pair.
  for (const std::string& ns : namespaces_) (void)RunTool({"ip", "netns", "del", ns});
  for (const std::string& host : host_ends_) {
    Result<std::string> shown = RunTool({"ip", "link", "show", host});
    if (shown.ok()) (void)RunTool({"ip", "link", "del", host});
  }
  if (!bridge_.empty()) (void)RunTool({"ip", "link", "del", bridge_});
  namespaces_.clear();
  host_ends_.clear();
  bridge_.clear();
}

KernelLinks::~KernelLinks() { Remove(); }

Result<ShaperPlan> PlanShapers(const std::vector<LinkProfile>& profiles, const std::string& shaper,
                               const std::string& who) {
  ShaperPlan plan;
  plan.user.assign(profiles.size(), LinkProfile());
  if (profiles.empty()) return plan;
  const std::string where = "tc on a veth pair per " + who + ", namespaces fedrt-" + Pid() + "-N";
  Status kernel = shaper == "user" ? Status(StatusCode::kUnavailable, "--shaper user") : KernelLinks::Available(profiles);
  if (kernel.ok()) {
    Result<std::unique_ptr<KernelLinks>> made = KernelLinks::Create(profiles);
    if (made.ok()) {
      plan.kernel = std::move(*made);
      plan.note = "kernel (" + where + ")";
      return plan;
    }
    kernel = made.status();
  }
  if (shaper == "kernel") {
    return Status(StatusCode::kUnavailable, "--shaper kernel: " + kernel.message() +
                                                " (--shaper auto shapes in user space what the kernel cannot)");
  }
  // A kernel without sch_netem still has tbf for the rates.
  bool delay = false, loss = false, rate = false;
  std::vector<LinkProfile> rates = profiles;
  for (LinkProfile& p : rates) {
    delay = delay || p.delay_ms != 0;
    loss = loss || p.loss > 0;
    rate = rate || p.up_bits_per_second != 0 || p.down_bits_per_second != 0;
    p.delay_ms = 0;
    p.loss = 0;
  }
  if (shaper == "auto" && delay && !loss && rate && KernelLinks::Available(rates).ok()) {
    Result<std::unique_ptr<KernelLinks>> made = KernelLinks::Create(rates);
    if (made.ok()) {
      plan.kernel = std::move(*made);
      for (std::size_t i = 0; i < profiles.size(); ++i) plan.user[i].delay_ms = profiles[i].delay_ms;
      plan.note = "kernel for the rate (" + where + "), user space for the delay (the kernel cannot: " +
                  kernel.message() + ")";
      return plan;
    }
  }
  plan.user = profiles;
  plan.note = "user space (the kernel cannot: " + kernel.message() + ")";
  return plan;
}

}  // namespace fedrt::cli
