// Local peer processes: config and key files, spawning and waiting.
#include "cli/peer_launch.h"

#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli/key_files.h"

namespace fedrt::cli {
namespace {

// A port the kernel considers free right now (bound, read, released).
Result<uint16_t> FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return IoError("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return IoError("cannot bind a port on 127.0.0.1");
  }
  close(fd);
  return static_cast<uint16_t>(ntohs(addr.sin_port));
}

}  // namespace

Result<LocalPeerFiles> WriteLocalPeerFiles(const std::string& dir, int peers, uint32_t step_timeout_ms,
                                           const std::vector<std::string>& hosts) {
  nlohmann::json list = nlohmann::json::array();
  std::string keys;
  std::vector<uint16_t> ports;
  for (int i = 0; i < peers; ++i) {
    if (!hosts.empty()) {  // an address of its own: any port is free there
      list.push_back({{"id", "peer-" + std::to_string(i)}, {"host", hosts.at(static_cast<std::size_t>(i))},
                      {"port", kNamespacePeerPort}});
      auto line = NewKeyLine("peer-" + std::to_string(i));
      if (!line.ok()) return line.status();
      keys += *line;
      continue;
    }
    Result<uint16_t> port = FreePort();
    if (!port.ok()) return port.status();
    for (uint16_t p : ports) {
      if (p == *port) return Internal("the kernel gave the same free port twice");
    }
    ports.push_back(*port);
    list.push_back({{"id", "peer-" + std::to_string(i)}, {"host", "127.0.0.1"}, {"port", *port}});
    auto line = NewKeyLine("peer-" + std::to_string(i));
    if (!line.ok()) return line.status();
    keys += *line;
  }
  LocalPeerFiles files{dir + "/peers.json", dir + "/peer-keys.txt"};
  nlohmann::json doc = {{"peers", list}, {"step_timeout_ms", step_timeout_ms}, {"join_timeout_ms", 20000}};
  std::ofstream config(files.config, std::ios::trunc);
  if (!(config << doc.dump(1) << "\n")) return IoError(files.config + ": cannot write");
  const Status written = WritePrivateFile(files.keys, keys);
  if (!written.ok()) return written;
  return files;
}

Result<std::vector<peer::PeerAddress>> ReadPeerConfig(const std::string& path, peer::PeerOptions* options) {
  std::ifstream in(path);
  if (!in) return NotFound(path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return InvalidArgument(path + ": not a JSON object");
  if (!doc.contains("peers") || !doc["peers"].is_array() || doc["peers"].empty()) {
    return InvalidArgument(path + ": needs a non-empty \"peers\" array");
  }
  std::vector<peer::PeerAddress> peers;
  for (std::size_t i = 0; i < doc["peers"].size(); ++i) {
    const nlohmann::json& e = doc["peers"][i];
    const std::string where = path + ": peers[" + std::to_string(i) + "]";
    if (!e.is_object() || !e.contains("id") || !e["id"].is_string() || !e.contains("host") ||
        !e["host"].is_string() || !e.contains("port") || !e["port"].is_number_unsigned() ||
        e["port"].get<uint64_t>() == 0 || e["port"].get<uint64_t>() > 65535) {
      return InvalidArgument(where + " needs \"id\" (string), \"host\" (string) and \"port\" (1..65535)");
    }
    peers.push_back({e["id"].get<std::string>(), e["host"].get<std::string>(),
                     static_cast<uint16_t>(e["port"].get<uint64_t>())});
  }
  auto number = [&](const char* key, uint32_t* out) -> Status {
    if (!doc.contains(key)) return Status::Ok();
    if (!doc[key].is_number_unsigned() || doc[key].get<uint64_t>() == 0 ||
        doc[key].get<uint64_t>() > 3600000) {
      return InvalidArgument(path + ": \"" + key + "\" must be a positive integer");
    }
    *out = static_cast<uint32_t>(doc[key].get<uint64_t>());
    return Status::Ok();
  };
  Status s = number("step_timeout_ms", &options->step_timeout_ms);
  if (s.ok()) s = number("join_timeout_ms", &options->join_timeout_ms);
  if (s.ok()) s = number("chunk_floats", &options->chunk_floats);
  if (!s.ok()) return s;
  // 0 is allowed here: no polling before a wait sleeps.
  if (doc.contains("busy_poll_us")) {
    if (!doc["busy_poll_us"].is_number_unsigned() || doc["busy_poll_us"].get<uint64_t>() > 1000000) {
      return InvalidArgument(path + ": \"busy_poll_us\" must be an integer from 0 to 1000000");
    }
    options->busy_poll_us = static_cast<uint32_t>(doc["busy_poll_us"].get<uint64_t>());
  }
  return peers;
}

int SpawnAndWait(const std::vector<std::vector<std::string>>& commands, int timeout_s,
                 std::vector<int>* pids_out) {
  std::vector<pid_t> pids;
  int failed = 0;
  for (const auto& command : commands) {
    std::vector<char*> argv;
    for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
      execv(argv[0], argv.data());
      _exit(127);
    }
    if (pid < 0) ++failed;
    pids.push_back(pid);
  }
  if (pids_out) pids_out->assign(pids.begin(), pids.end());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  std::vector<bool> done(pids.size(), false);
  std::size_t remaining = 0;
  for (pid_t p : pids) remaining += p > 0 ? 1 : 0;
  while (remaining > 0) {
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (pids[i] <= 0 || done[i]) continue;
      int status = 0;
      if (waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        done[i] = true;
        --remaining;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
      }
    }
    if (remaining == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (std::size_t i = 0; i < pids.size(); ++i) {
        if (pids[i] > 0 && !done[i]) {
          kill(pids[i], SIGKILL);
          waitpid(pids[i], nullptr, 0);
          ++failed;
        }
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return failed;
}

}  // namespace fedrt::cli
