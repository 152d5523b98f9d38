// A child process for integration tests that run the real `fedrt` tool:
// ChildProcess starts it, collects what it prints and waits on it by reading
// its output (poll on the pipe, no sleeping); Emulated puts a cross build's
// emulator in front of a command.
//
// Thread-safety: none; each object belongs to one test thread.
#ifndef FEDRT_TESTS_SUPPORT_CHILD_PROCESS_H_
#define FEDRT_TESTS_SUPPORT_CHILD_PROCESS_H_

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <vector>

namespace fedrt::testing {

class ChildProcess {
 public:
  // args[0] is the executable (a path, or a name looked up in PATH); stdout
  // and stderr are both collected.
  explicit ChildProcess(const std::vector<std::string>& args) {
    int fds[2];
    if (::pipe(fds) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      ::close(fds[0]);
      ::close(fds[1]);
      std::vector<char*> argv;
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    fd_ = fds[0];
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
    if (fd_ >= 0) ::close(fd_);
  }

  bool started() const { return pid_ > 0 && fd_ >= 0; }
  pid_t pid() const { return pid_; }
  const std::string& output() const { return out_; }

  std::size_t Count(const std::string& text, std::size_t from = 0) const {
    std::size_t n = 0;
    for (std::size_t at = out_.find(text, from); at != std::string::npos; at = out_.find(text, at + 1)) ++n;
    return n;
  }

  // Reads output until `text` has appeared `count` times (true), the process
  // closed its output or `timeout_s` passed (false).
  bool WaitFor(const std::string& text, std::size_t count = 1, int timeout_s = 180) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (Count(text) < count) {
      if (eof_ || !ReadSome(deadline)) return false;
    }
    return true;
  }

  // The rest of the first line that contains `text` (after it), once that
  // line is complete; empty when it never came.
  std::string WaitForLine(const std::string& text, int timeout_s = 180) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    for (;;) {
      const std::size_t at = out_.find(text);
      const std::size_t end = at == std::string::npos ? at : out_.find('\n', at);
      if (end != std::string::npos) return out_.substr(at + text.size(), end - at - text.size());
      if (eof_ || !ReadSome(deadline)) return std::string();
    }
  }

  // Waits for the process to end: its exit code, 128 + the signal that ended
  // it, or -1 when it was still running after `timeout_s` (it is killed).
  int Wait(int timeout_s = 180) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    while (!eof_ && ReadSome(deadline)) {
    }
    int status = 0;
    if (!eof_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      reaped_ = true;
      return -1;
    }
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
  }

  void Signal(int signal) { ::kill(pid_, signal); }

 private:
  // One poll + read; false once the deadline has passed.
  bool ReadSome(std::chrono::steady_clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return errno == EINTR;
    char buffer[4096];
    const ssize_t n = ::read(fd_, buffer, sizeof(buffer));
    if (n > 0) out_.append(buffer, static_cast<std::size_t>(n));
    if (n == 0) eof_ = true;
    return true;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  std::string out_;
  bool eof_ = false;
  bool reaped_ = false;
};

// `command` behind the emulator of a cross build: `emulator` is its command
// with '|' between the words ("qemu-aarch64|-L|/usr/aarch64-linux-gnu"),
// empty for a native build.
inline std::vector<std::string> Emulated(const std::string& emulator, std::vector<std::string> command) {
  std::vector<std::string> words;
  for (std::size_t begin = 0; begin < emulator.size();) {
    std::size_t end = emulator.find('|', begin);
    if (end == std::string::npos) end = emulator.size();
    if (end > begin) words.push_back(emulator.substr(begin, end - begin));
    begin = end + 1;
  }
  for (std::string& word : command) words.push_back(std::move(word));
  return words;
}

}  // namespace fedrt::testing

#endif  // FEDRT_TESTS_SUPPORT_CHILD_PROCESS_H_
