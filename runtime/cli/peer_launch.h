// Starting N peer processes on 127.0.0.1: the shared part of
// `fedrt bench allreduce` and of a `fedrt sim --topology ring` launcher.
//
// WriteLocalPeerFiles picks N free ports, writes `<dir>/peers.json` (the
// config `fedrt peer --peers` reads) and `<dir>/peer-keys.txt` (a fresh
// random key per peer, mode 0600). SpawnAndWait starts one process per
// argument vector and waits for all of them (bounded: after `timeout_s` the
// stragglers are killed by pid); it returns the number that failed.
//
// A simulation launcher runs, for example:
//   auto files = WriteLocalPeerFiles(dir, n, 5000);
//   for r in 0..n-1: {"/proc/self/exe", "peer", "--peers", files->config,
//                     "--keys", files->keys, "--rank", r, ...training flags}
//   SpawnAndWait(argvs, 3600);
#ifndef FEDRT_RUNTIME_CLI_PEER_LAUNCH_H_
#define FEDRT_RUNTIME_CLI_PEER_LAUNCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "fedrt/platform/status.h"
#include "fedrt/runtime/peer.h"

namespace fedrt::cli {

struct LocalPeerFiles {
  std::string config;  // peers.json
  std::string keys;    // peer-keys.txt
};

// `hosts` (one per peer; empty: 127.0.0.1 and free ports): each peer's own
// address, every peer on port kNamespacePeerPort (peers in network
// namespaces of their own, `fedrt sim --link`).
Result<LocalPeerFiles> WriteLocalPeerFiles(const std::string& dir, int peers, uint32_t step_timeout_ms,
                                           const std::vector<std::string>& hosts = {});
inline constexpr uint16_t kNamespacePeerPort = 7000;

// Reads a peers.json: {"peers": [{"id", "host", "port"}...], optional
// "step_timeout_ms", "join_timeout_ms", "chunk_floats"}.
Result<std::vector<peer::PeerAddress>> ReadPeerConfig(const std::string& path, peer::PeerOptions* options);

// Starts every command, waits for all; returns how many exited non-zero (or
// were killed at the timeout). `pids` (optional) receives the pids in order.
int SpawnAndWait(const std::vector<std::vector<std::string>>& commands, int timeout_s,
                 std::vector<int>* pids = nullptr);

}  // namespace fedrt::cli

#endif  // FEDRT_RUNTIME_CLI_PEER_LAUNCH_H_
