// The kernel link shaper of `fedrt sim`: each device process runs in a
// network namespace of its own, joined to the aggregator's (this process's)
// by a veth pair whose host end is a port of a per-run bridge; `tc` shapes
// both ends (tbf for the rate, netem for delay and loss where the kernel has
// sch_netem). Needs root and the `ip` and `tc` programs (iproute2).
//
// Names carry this process's id (`fedrt-<pid>-<i>` namespaces, `fr<pid>...`
// interfaces) and the subnet is a /24 of 100.64.0.0/10 no interface of this
// machine uses, so parallel runs do not collide. Everything is removed by
// Remove() (the destructor calls it): on success, on failure and, because
// `fedrt sim` turns SIGINT and SIGTERM into a clean stop, when interrupted.
// A run killed outright (SIGKILL) leaves its namespaces behind; the next
// Create removes those of processes that no longer exist.
//
// Ownership: a KernelLinks owns the namespaces, the veth pairs and the
// bridge it created. Thread-safety: none; one thread sets up and removes.
#ifndef FEDRT_RUNTIME_CLI_KERNEL_LINKS_H_
#define FEDRT_RUNTIME_CLI_KERNEL_LINKS_H_

#include <memory>
#include <string>
#include <vector>

#include "fedrt/platform/status.h"
#include "fedrt/transport/link_profile.h"

namespace fedrt::cli {

class KernelLinks {
 public:
  // OK when this process can shape `profiles` in the kernel; otherwise
  // kUnavailable saying why not (not root, no `ip netns`, no tbf, or
  // sch_netem missing for a delay or a loss), which the caller prints before
  // it falls back to the user-space shaper.
  static Status Available(const std::vector<transport::LinkProfile>& profiles);
  // One namespace per profile (device i gets profiles[i]); at most 250.
  static Result<std::unique_ptr<KernelLinks>> Create(const std::vector<transport::LinkProfile>& profiles);
  ~KernelLinks();
  KernelLinks(const KernelLinks&) = delete;
  KernelLinks& operator=(const KernelLinks&) = delete;

  // Where devices reach the aggregator: the bridge's address.
  const std::string& host_address() const { return host_address_; }
  // Device i's namespace name (for `ip netns exec`) and address.
  const std::string& netns(int i) const { return namespaces_[static_cast<std::size_t>(i)]; }
  std::string device_address(int i) const;
  // Removes the namespaces, the veth pairs and the bridge; idempotent.
  void Remove();

 private:
  KernelLinks() = default;
  Status Shape(const std::string& device, const std::string& namespace_name, uint64_t bits_per_second,
               const transport::LinkProfile& profile);

  std::string prefix_;        // "100.A.B."
  std::string host_address_;  // prefix_ + "1"
  std::string bridge_;
  std::vector<std::string> namespaces_;
  std::vector<std::string> host_ends_;
};

// Which shaper does what for a run's links (`--shaper auto|kernel|user`),
// for the devices of a star sim and the peers of a ring or gossip sim:
// - the kernel shapes everything when it can (root, ip netns, tbf, and
//   sch_netem for a delay or a loss);
// - auto on a kernel that has tbf but not sch_netem: the kernel shapes the
//   rate and the user-space shaper adds the delay (each process gets the
//   delay-only profile `unlimited,delay=MS`), unless a profile has a loss,
//   which the user-space shaper models as retransmission time on its own
//   rate: then user space does everything;
// - otherwise (or --shaper user) the user-space shaper does everything.
// `note` says which did what, for the run's header; `who` is "device" or
// "peer". --shaper kernel is an error when the kernel cannot do it all.
struct ShaperPlan {
  std::unique_ptr<KernelLinks> kernel;  // null: no namespaces (everything on 127.0.0.1)
  // Per device / peer: what its own user-space shaper does (`fedrt device
  // --link`, `fedrt peer --link`); shaped() false: nothing.
  std::vector<transport::LinkProfile> user;
  std::string note;
};
Result<ShaperPlan> PlanShapers(const std::vector<transport::LinkProfile>& profiles, const std::string& shaper,
                               const std::string& who);

// Runs `args` (a program and its arguments, no shell) and returns its
// output; kUnavailable with the output when it fails. For ip and tc.
Result<std::string> RunTool(const std::vector<std::string>& args);

}  // namespace fedrt::cli

#endif  // FEDRT_RUNTIME_CLI_KERNEL_LINKS_H_
