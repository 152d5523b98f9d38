// The aggregator's checkpoint file: a checkpoint (checkpoint.h) with the
// aggregator's section, which training reads too; the earlier builds'
// "FEDRTAGG" files: version 2 keeps the codec state (level
// table, NDQSG rho and forced anchors, downlink device model and the devices'
// acknowledged rounds) bit for bit, version 3 the DP accountant's state;
// version 1 and 2 files still load; other
// versions, truncated files, damaged bytes and bad counts give typed errors;
// a file that exists but cannot be read is an error, never "no checkpoint".
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "fedrt/codecs/payload.h"
#include "star/aggregator_checkpoint.h"
#include "temp_dir.h"

namespace fedrt {
namespace {

AggregatorCheckpoint Sample() {
  AggregatorCheckpoint c;
  c.model = "mlp:4-2";
  c.round = 7;
  c.parameters = {1.5f, -2.0f, 0.25f};
  c.first_moment = {0.5f, 0.5f, 0.5f};
  c.codec = "alq:bits=3,b=1024,ef=off,ec=rans";
  c.level_table_version = 6;
  c.level_table = {0.0f, 0.03f, 0.1f, 1.0f};
  c.rho = {{"dev-1", 3}, {"dev-7", 5}};
  c.forced_anchors = {"dev-2"};
  c.downlink_codec = "fp16";
  c.device_model_round = 6;
  c.device_model = {1.0f, -2.0f, 0.5f};
  c.synced = {{"dev-1", 6}, {"dev-2", 5}};
  return c;
}

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// What section version 2 adds at its end when no level statistics are
// pending: u32 rounds since the refit, f64 count, sum, sum_sq, u64 0 bucket
// norms, u64 0 buckets.
constexpr std::size_t kEmptyPendingLevelsBytes = 4 + 3 * 8 + 8 + 8;

// Rewrites the trailing CRC after a deliberate change.
void Reseal(std::vector<uint8_t>& bytes) { StoreLe32(bytes.data() + bytes.size() - 4, Crc32c(bytes.data(), bytes.size() - 4)); }

// The file an earlier build wrote for `c` ("FEDRTAGG" version 3: u32 round,
// the model, the three array counts, the arrays, codec and privacy state),
// made from the checkpoint this build writes (the same fields, the model in
// the checkpoint and the rest in its aggregator section).
std::vector<uint8_t> LegacyFile(const std::string& path, const AggregatorCheckpoint& c) {
  REQUIRE(WriteAggregatorCheckpoint(path, c).ok());
  const std::vector<uint8_t> now = ReadBytes(path);
  REQUIRE(std::memcmp(now.data(), "FEDRTCKP", 8) == 0);
  std::size_t at = 8 + 4 + 4 + 8 + 8;                      // magic, version, reserved, step, epoch
  at += 4 + LoadLe32(now.data() + at);                     // spec
  const uint64_t parameters = LoadLe64(now.data() + at);
  const std::size_t parameters_at = at + 8;
  at = parameters_at + 4 * static_cast<std::size_t>(parameters);
  at += 8 + 4 * static_cast<std::size_t>(LoadLe64(now.data() + at));  // momentum
  const uint64_t section = LoadLe64(now.data() + at);
  const uint8_t* s = now.data() + at + 8;
  REQUIRE(at + 8 + section + 4 == now.size());
  REQUIRE(c.pending_levels.count == 0);
  REQUIRE(LoadLe32(s) == 2);
  const std::size_t v1_section = static_cast<std::size_t>(section) - kEmptyPendingLevelsBytes;
  std::vector<uint8_t> old = {'F', 'E', 'D', 'R', 'T', 'A', 'G', 'G', 3, 0, 0, 0};
  old.insert(old.end(), s + 4, s + 8);                     // round
  std::vector<uint8_t> length(4);
  StoreLe32(length.data(), static_cast<uint32_t>(c.model.size()));
  old.insert(old.end(), length.begin(), length.end());
  old.insert(old.end(), c.model.begin(), c.model.end());
  old.insert(old.end(), now.data() + parameters_at - 8, now.data() + parameters_at);  // parameter count
  old.insert(old.end(), s + 8, s + 24);                    // moment counts
  old.insert(old.end(), now.data() + parameters_at, now.data() + parameters_at + 4 * parameters);
  old.insert(old.end(), s + 24, s + v1_section);           // moments, codec and privacy state
  old.insert(old.end(), 4, 0);
  Reseal(old);
  WriteBytes(path, old);
  return old;
}

TEST_CASE("an aggregator checkpoint keeps the codec state bit for bit") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("agg.ckpt");
  const AggregatorCheckpoint c = Sample();
  REQUIRE(WriteAggregatorCheckpoint(path, c).ok());
  Result<AggregatorCheckpoint> back = ReadAggregatorCheckpoint(path);
  REQUIRE(back.ok());
  CHECK(back->model == c.model);
  CHECK(back->round == 7);
  CHECK(back->parameters == c.parameters);
  CHECK(back->first_moment == c.first_moment);
  CHECK(back->second_moment.empty());
  CHECK(back->codec == c.codec);
  CHECK(back->level_table_version == 6);
  CHECK(back->level_table == c.level_table);
  CHECK(back->rho == c.rho);
  CHECK(back->forced_anchors == c.forced_anchors);
  CHECK(back->downlink_codec == "fp16");
  CHECK(back->device_model_round == 6);
  CHECK(back->device_model == c.device_model);
  CHECK(back->synced == c.synced);
}

TEST_CASE("an aggregator checkpoint keeps ALQ / AMQ's pending level statistics, and a version 1 section loads without") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("agg.ckpt");
  AggregatorCheckpoint c = Sample();
  c.rounds_since_refit = 3;
  c.pending_levels.count = 1536;
  c.pending_levels.sum = 211.25;
  c.pending_levels.sum_sq = 40.0625;
  c.pending_levels.bucket_norms = {2.5f, 0.75f};
  c.pending_levels.largest_buckets = {{2.5f, 1024, 150.5, 30.25}, {0.75f, 512, 60.75, 9.8125}};
  REQUIRE(WriteAggregatorCheckpoint(path, c).ok());
  Result<AggregatorCheckpoint> back = ReadAggregatorCheckpoint(path);
  REQUIRE_MESSAGE(back.ok(), back.status().ToString());
  CHECK(back->rounds_since_refit == 3);
  CHECK(back->pending_levels.count == 1536);
  CHECK(back->pending_levels.sum == 211.25);
  CHECK(back->pending_levels.sum_sq == 40.0625);
  CHECK(back->pending_levels.bucket_norms == c.pending_levels.bucket_norms);
  REQUIRE(back->pending_levels.largest_buckets.size() == 2);
  CHECK(back->pending_levels.largest_buckets[1].norm == 0.75f);
  CHECK(back->pending_levels.largest_buckets[1].sum_sq == 9.8125);
  CHECK(back->synced == c.synced);
  // A bucket count beyond the bytes left is refused.
  std::vector<uint8_t> bytes = ReadBytes(path);
  const std::size_t buckets_at = bytes.size() - 4 - 2 * 28 - 8;
  REQUIRE(LoadLe64(bytes.data() + buckets_at) == 2);
  std::vector<uint8_t> bad = bytes;
  StoreLe64(bad.data() + buckets_at, 3);
  Reseal(bad);
  WriteBytes(path, bad);
  CHECK(ReadAggregatorCheckpoint(path).status().code() == StatusCode::kCorrupt);

  // Section version 1: the same without the trailer, nothing pending.
  AggregatorCheckpoint plain = Sample();
  REQUIRE(WriteAggregatorCheckpoint(path, plain).ok());
  std::vector<uint8_t> v2 = ReadBytes(path);
  const std::size_t section_end = v2.size() - 4;
  std::vector<uint8_t> v1(v2.begin(), v2.begin() + static_cast<std::ptrdiff_t>(section_end - kEmptyPendingLevelsBytes));
  v1.insert(v1.end(), 4, 0);
  // The section's length (u64 before it) and its version (its first u32).
  std::size_t at = 8 + 4 + 4 + 8 + 8;
  at += 4 + LoadLe32(v2.data() + at);
  at += 8 + 4 * static_cast<std::size_t>(LoadLe64(v2.data() + at));
  at += 8 + 4 * static_cast<std::size_t>(LoadLe64(v2.data() + at));
  StoreLe64(v1.data() + at, LoadLe64(v2.data() + at) - kEmptyPendingLevelsBytes);
  REQUIRE(LoadLe32(v1.data() + at + 8) == 2);
  StoreLe32(v1.data() + at + 8, 1);
  Reseal(v1);
  WriteBytes(path, v1);
  Result<AggregatorCheckpoint> old = ReadAggregatorCheckpoint(path);
  REQUIRE_MESSAGE(old.ok(), old.status().ToString());
  CHECK(old->rounds_since_refit == 0);
  CHECK(old->pending_levels.count == 0);
  CHECK(old->level_table == plain.level_table);
  CHECK(old->synced == plain.synced);
}

TEST_CASE("a version 1 aggregator checkpoint still loads without codec state") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("agg.ckpt");
  AggregatorCheckpoint c = Sample();
  // Version 2 is version 3 without the privacy state (an empty one: a u32
  // count of 0), version 1 version 2 without the codec state: cut them off,
  // set the version.
  std::vector<uint8_t> bytes = LegacyFile(path, c);
  Result<AggregatorCheckpoint> v3 = ReadAggregatorCheckpoint(path);
  REQUIRE(v3.ok());
  CHECK(v3->round == 7);
  CHECK(v3->parameters == c.parameters);
  CHECK(v3->synced == c.synced);
  REQUIRE(LoadLe32(bytes.data() + bytes.size() - 8) == 0);
  bytes.erase(bytes.end() - 8, bytes.end() - 4);
  StoreLe32(bytes.data() + 8, 2);
  Reseal(bytes);
  WriteBytes(path, bytes);
  Result<AggregatorCheckpoint> v2 = ReadAggregatorCheckpoint(path);
  REQUIRE(v2.ok());
  CHECK(v2->synced == c.synced);
  CHECK(v2->dp_rdp.empty());
  AggregatorCheckpoint bare;
  bare.model = c.model;
  bare.round = c.round;
  bare.parameters = c.parameters;
  bare.first_moment = c.first_moment;
  std::vector<uint8_t> v1 = LegacyFile(path, bare);
  // Empty codec state: 4 (codec) + 8 (table) + 4 + 4 (rho, anchors) + 4 + 8 + 8 (downlink) + 4 (synced).
  const std::size_t empty_state = 44 + 4;  // and the empty privacy state
  REQUIRE(v1.size() > empty_state + 4);
  v1.erase(v1.end() - 4 - empty_state, v1.end() - 4);
  StoreLe32(v1.data() + 8, 1);
  Reseal(v1);
  WriteBytes(path, v1);
  Result<AggregatorCheckpoint> back = ReadAggregatorCheckpoint(path);
  REQUIRE(back.ok());
  CHECK(back->round == 7);
  CHECK(back->parameters == c.parameters);
  CHECK(back->codec.empty());
  CHECK(back->level_table.empty());
  CHECK(back->device_model_round == -1);

  // A later version is refused by name; so are cut or padded codec states.
  StoreLe32(bytes.data() + 8, 4);
  Reseal(bytes);
  WriteBytes(path, bytes);
  back = ReadAggregatorCheckpoint(path);
  CHECK(back.status().code() == StatusCode::kUnsupported);
  CHECK(back.status().message().find("version 4") != std::string::npos);
  StoreLe32(bytes.data() + 8, 2);
  std::vector<uint8_t> cut(bytes.begin(), bytes.end() - 12);
  cut.insert(cut.end(), 4, 0);
  Reseal(cut);
  WriteBytes(path, cut);
  CHECK(ReadAggregatorCheckpoint(path).status().code() == StatusCode::kCorrupt);
  std::vector<uint8_t> padded(bytes.begin(), bytes.end() - 4);
  padded.insert(padded.end(), 8, 0);
  padded.insert(padded.end(), 4, 0);
  Reseal(padded);
  WriteBytes(path, padded);
  CHECK(ReadAggregatorCheckpoint(path).status().code() == StatusCode::kCorrupt);
  // A device model count larger than the file.
  std::vector<uint8_t> huge = bytes;
  const std::size_t count_at = huge.size() - 4 - (4 + 2 * (4 + 5 + 8)) - 3 * 4 - 8;
  REQUIRE(LoadLe64(huge.data() + count_at) == 3);
  StoreLe64(huge.data() + count_at, uint64_t{1} << 40);
  Reseal(huge);
  WriteBytes(path, huge);
  CHECK(ReadAggregatorCheckpoint(path).status().code() == StatusCode::kCorrupt);
}

TEST_CASE("training and aggregation share one checkpoint: each takes the model and keeps the other's state") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("model.ckpt");
  // What `fedrt train` writes starts an aggregator at round 0 from its model.
  Checkpoint trained;
  trained.spec = "mlp:4-2";
  trained.step = 40;
  trained.epoch = 3;
  trained.parameters = {0.5f, 1.0f, -1.0f};
  trained.velocity = {0.0f, 0.1f, 0.2f};
  REQUIRE(WriteCheckpointFile(path, trained).ok());
  Result<AggregatorCheckpoint> start = ReadAggregatorCheckpoint(path);
  REQUIRE(start.ok());
  CHECK(start->model == "mlp:4-2");
  CHECK(start->round == 0);
  CHECK(start->parameters == trained.parameters);
  CHECK(start->first_moment.empty());
  CHECK(start->codec.empty());

  // What the aggregator writes is a checkpoint training resumes from (epoch
  // 0, its global model); training writes it back with the aggregator's
  // section unchanged, and the aggregator resumes at its round from the
  // model training left.
  REQUIRE(WriteAggregatorCheckpoint(path, Sample()).ok());
  Result<Checkpoint> global = ReadCheckpointFile(path);
  REQUIRE(global.ok());
  CHECK(global->spec == "mlp:4-2");
  CHECK(global->epoch == 0);
  CHECK(global->step == 0);
  CHECK(global->velocity.empty());
  CHECK(global->parameters == Sample().parameters);
  REQUIRE_FALSE(global->aggregator_state.empty());
  global->parameters = {9.0f, 8.0f, 7.0f};
  global->epoch = 1;
  REQUIRE(WriteCheckpointFile(path, *global).ok());
  Result<AggregatorCheckpoint> resumed = ReadAggregatorCheckpoint(path);
  REQUIRE(resumed.ok());
  CHECK(resumed->round == 7);
  CHECK(resumed->parameters == std::vector<float>{9.0f, 8.0f, 7.0f});
  CHECK(resumed->first_moment == Sample().first_moment);
  CHECK(resumed->codec == Sample().codec);
  CHECK(resumed->synced == Sample().synced);

  // An aggregator file of an earlier build reads as a checkpoint with that
  // state in its section (what `fedrt train --checkpoint` takes).
  LegacyFile(path, Sample());
  CHECK(ReadCheckpointFile(path).status().code() == StatusCode::kCorrupt);  // the training core's reader
  Result<Checkpoint> legacy = ReadAnyCheckpointFile(path);
  REQUIRE(legacy.ok());
  CHECK(legacy->spec == "mlp:4-2");
  CHECK(legacy->parameters == Sample().parameters);
  Result<AggregatorCheckpoint> state = AggregatorStateOf(*legacy, path);
  REQUIRE(state.ok());
  CHECK(state->round == 7);
  CHECK(state->level_table == Sample().level_table);
  CHECK(state->rho == Sample().rho);
}

TEST_CASE("an aggregator checkpoint keeps the DP accountant's state bit for bit") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("agg.ckpt");
  AggregatorCheckpoint c = Sample();
  c.dp_rdp = {0.125, 1e-300, 3.5e10, 0.0};
  REQUIRE(WriteAggregatorCheckpoint(path, c).ok());
  Result<AggregatorCheckpoint> back = ReadAggregatorCheckpoint(path);
  REQUIRE(back.ok());
  CHECK(back->dp_rdp == c.dp_rdp);
  CHECK(back->synced == c.synced);
  // A count larger than the values in the file, and a count past the limit.
  std::vector<uint8_t> bytes = ReadBytes(path);
  const std::size_t count_at = bytes.size() - 4 - kEmptyPendingLevelsBytes - 4 * 8 - 4;
  REQUIRE(LoadLe32(bytes.data() + count_at) == 4);
  for (uint32_t count : {5u, 100000u}) {
    std::vector<uint8_t> bad = bytes;
    StoreLe32(bad.data() + count_at, count);
    Reseal(bad);
    WriteBytes(path, bad);
    CHECK(ReadAggregatorCheckpoint(path).status().code() == StatusCode::kCorrupt);
  }
}

TEST_CASE("a missing aggregator checkpoint is not found but an unreadable or damaged one is an error") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("agg.ckpt");
  Result<AggregatorCheckpoint> back = ReadAggregatorCheckpoint(path);
  CHECK(back.status().code() == StatusCode::kNotFound);

  REQUIRE(::mkdir(path.c_str(), 0755) == 0);  // unreadable as a file for root too
  back = ReadAggregatorCheckpoint(path);
  CHECK(back.status().code() == StatusCode::kIoError);
  CHECK(back.status().message() == path + ": cannot read: " + std::strerror(EISDIR));
  REQUIRE(::rmdir(path.c_str()) == 0);

  REQUIRE(WriteAggregatorCheckpoint(path, Sample()).ok());
  const std::vector<uint8_t> good = ReadBytes(path);
  if (::geteuid() != 0) {  // root reads a mode-000 file
    REQUIRE(::chmod(path.c_str(), 0) == 0);
    back = ReadAggregatorCheckpoint(path);
    CHECK(back.status().code() == StatusCode::kIoError);
    CHECK(back.status().message().find(std::strerror(EACCES)) != std::string::npos);
    REQUIRE(::chmod(path.c_str(), 0644) == 0);
  }
  for (std::size_t size = 0; size < good.size(); size += 7) {
    WriteBytes(path, std::vector<uint8_t>(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(size)));
    back = ReadAggregatorCheckpoint(path);
    REQUIRE(back.status().code() == StatusCode::kCorrupt);
    CHECK(back.status().message().find(path + ": ") == 0);
  }
  for (std::size_t at = 0; at < good.size(); ++at) {
    std::vector<uint8_t> damaged = good;
    damaged[at] ^= 0x20;
    WriteBytes(path, damaged);
    REQUIRE_FALSE(ReadAggregatorCheckpoint(path).ok());
  }
  WriteBytes(path, good);
  CHECK(ReadAggregatorCheckpoint(path).ok());
}

TEST_CASE("an aggregator checkpoint write that fails leaves the previous checkpoint whole") {
  testing::TempDir dir;
  REQUIRE(dir.ok());
  const std::string path = dir.File("agg.ckpt");
  REQUIRE(WriteAggregatorCheckpoint(path, Sample()).ok());
  REQUIRE(::mkdir((path + ".tmp").c_str(), 0755) == 0);  // the temporary file cannot be created
  AggregatorCheckpoint later = Sample();
  later.round = 8;
  const Status s = WriteAggregatorCheckpoint(path, later);
  CHECK(s.code() == StatusCode::kIoError);
  CHECK(s.message().find(path + ".tmp: cannot create: ") == 0);
  Result<AggregatorCheckpoint> kept = ReadAggregatorCheckpoint(path);
  REQUIRE(kept.ok());
  CHECK(kept->round == 7);
}

}  // namespace
}  // namespace fedrt
