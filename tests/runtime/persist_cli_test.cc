// Resuming from files as a user runs the tool: `fedrt train --checkpoint`
// and `fedrt serve --checkpoint` start afresh (and say so) only when there is
// no file; a file that exists but cannot be read or is damaged stops them
// with the reason, before any training. (`fedrt device --state-file` is
// covered with the star processes, star_process_test.cc.)
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "run_cli.h"
#include "temp_dir.h"

namespace fedrt {
namespace {

using testing::CliRun;
using testing::RunCli;

std::string Quoted(const std::string& s) { return "'" + s + "'"; }

TEST_CASE("fedrt train stops with the reason when its checkpoint exists but cannot be read") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const std::string checkpoint = dir.File("model.ckpt");
  REQUIRE(::mkdir(checkpoint.c_str(), 0755) == 0);  // unreadable as a file, also for root
  // The checkpoint is read before the data set, so none is needed.
  const CliRun run = RunCli("train --data " + Quoted(dir.File("no-data")) + " --epochs 1 --checkpoint " +
                            Quoted(checkpoint));
  INFO(run.output);
  CHECK(run.exit_code == 1);
  CHECK(run.output.find("fedrt train: io_error: " + checkpoint + ": cannot read: " + std::strerror(EISDIR)) !=
        std::string::npos);
  CHECK(run.output.find("no checkpoint") == std::string::npos);
  CHECK(run.output.find("epoch 1/") == std::string::npos);
}

TEST_CASE("fedrt train stops on a damaged checkpoint and starts afresh, saying so, when there is none") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const std::string checkpoint = dir.File("model.ckpt");
  const std::string train = "train --data " + Quoted(FEDRT_TINY_IDX_DIR) +
                            " --model mlp:784-32-10 --batch 16 --checkpoint " + Quoted(checkpoint);
  CliRun run = RunCli(train + " --epochs 1");
  INFO(run.output);
  CHECK(run.exit_code == 0);
  CHECK(run.output.find("no checkpoint at " + checkpoint + " yet: starting at epoch 0") != std::string::npos);
  CHECK(run.output.find("epoch 1/1") != std::string::npos);

  const std::string saved = testing::ReadFileBytes(checkpoint);
  REQUIRE(saved.size() > 100);
  std::ofstream(checkpoint, std::ios::binary | std::ios::trunc) << saved.substr(0, saved.size() - 1);
  run = RunCli(train + " --epochs 2");
  INFO(run.output);
  CHECK(run.exit_code == 1);
  CHECK(run.output.find("fedrt train: corrupt: " + checkpoint + ": checksum mismatch") != std::string::npos);
  CHECK(run.output.find("epoch 2/") == std::string::npos);
}

TEST_CASE("fedrt serve stops with the reason when its checkpoint exists but cannot be read") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  std::ofstream(dir.File("keys.txt")) << "dev-0 00112233445566778899aabbccddeeff\n";
  ::chmod(dir.File("keys.txt").c_str(), 0600);
  // --rounds 0: a serve that starts has nothing to wait for and ends at once.
  const std::string serve = "serve --host 127.0.0.1 --port 0 --data '' --rounds 0 --key-file " +
                            Quoted(dir.File("keys.txt")) + " --checkpoint ";
  const std::string checkpoint = dir.File("aggregator.ckpt");

  const CliRun run = RunCli(serve + Quoted(checkpoint));
  INFO(run.output);
  CHECK(run.exit_code == 0);
  CHECK(run.output.find("no checkpoint at " + checkpoint + " yet: starting at round 0") != std::string::npos);

  // A checkpoint that is there but cannot be read stops serve before it
  // listens, with `reason`, and is never taken for a fresh start.
  const auto refused = [&](const std::string& path, const std::string& reason) {
    const CliRun stopped = RunCli(serve + Quoted(path));
    INFO(stopped.output);
    CHECK(stopped.exit_code == 1);
    CHECK(stopped.output.find("fedrt serve: io_error: " + path + ": " + reason) != std::string::npos);
    CHECK(stopped.output.find("starting at round 0") == std::string::npos);
    CHECK(stopped.output.find("listening on") == std::string::npos);
  };
  REQUIRE(::mkdir(checkpoint.c_str(), 0755) == 0);
  refused(checkpoint, std::string("cannot read: ") + std::strerror(EISDIR));
  // A path under a regular file: open() fails with ENOTDIR, not ENOENT (and
  // for root too).
  refused(dir.File("keys.txt") + "/aggregator.ckpt", std::string("cannot open: ") + std::strerror(ENOTDIR));
  // The campaign's case: a checkpoint the process may not open. Root opens
  // any file, so this runs only as another user (the cases above stand in
  // for it in CI); the file is left as it was.
  if (::geteuid() != 0) {
    const std::string locked = dir.File("locked.ckpt");
    std::ofstream(locked, std::ios::binary) << "saved rounds";
    REQUIRE(::chmod(locked.c_str(), 0) == 0);
    refused(locked, std::string("cannot open: ") + std::strerror(EACCES));
    REQUIRE(::chmod(locked.c_str(), 0600) == 0);
    CHECK(testing::ReadFileBytes(locked) == "saved rounds");
  }
}

}  // namespace
}  // namespace fedrt
