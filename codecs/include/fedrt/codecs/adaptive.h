// Codecs with an adaptive level table (ALQ, AMQ; codecs/README.md):
// the Codec interface plus a way to install a new table.
//
// An `alq` or `amq` codec starts with its initial table, version 0 (ALQ:
// uniform levels j/s; AMQ: exponential levels 0.5^(s-j)), with
// s = 2^(bits-1) - 1 levels per sign. Whoever owns the table (aggregator, or
// every peer after all-reducing LevelStatistics) fits a new one and ships it
// with a higher version; every encoder and decoder of that tensor installs it
// with SetLevelTable. Payloads carry the version they were encoded with, and
// decoding a payload of another version fails with kFailedPrecondition.
//
// Thread-safety: as Codec (not synchronized; SetLevelTable must not race
// with Encode or Decode on the same object).
#ifndef FEDRT_CODECS_ADAPTIVE_H_
#define FEDRT_CODECS_ADAPTIVE_H_

#include <memory>
#include <string>

#include "fedrt/codecs/codec.h"
#include "fedrt/codecs/level_fit.h"
#include "fedrt/codecs/levels.h"

namespace fedrt {

class AdaptiveCodec : public Codec {
 public:
  // Installs `table`: it must pass ValidateLevels and have exactly
  // levels_per_sign() + 1 entries (kInvalidArgument otherwise, and the
  // current table stays).
  virtual Status SetLevelTable(const LevelTable& table) = 0;
  virtual const LevelTable& level_table() const = 0;
  // s: the number of nonzero levels per sign (alphabet 2s + 1).
  virtual int levels_per_sign() const = 0;
  // The density the table owner fits: key model=pooled (default) or
  // model=norm (the norm-weighted "-N" mixture; see level_fit.h).
  virtual LevelModel level_model() const = 0;
  // Key refit=N (default 1): the table owner fits a new table every N rounds
  // (star) or all-reduce steps (ring), from the statistics merged since the
  // last fit. The codec itself only carries the number.
  virtual uint32_t refit_interval() const = 0;
  // The statistics a sender measures from the vector it encodes (its bucket
  // size and norm; ComputeLevelStatistics, level_fit.h) and sends beside the
  // payload, so the table owner can fit the next table.
  virtual Result<LevelStatistics> MeasureLevelStatistics(const float* input, std::size_t d) const = 0;
  // The same into *out, keeping its vectors' memory (ComputeLevelStatisticsInto).
  virtual Status MeasureLevelStatisticsInto(const float* input, std::size_t d, LevelStatistics* out) const = 0;
};

// The next table for `codec` from merged statistics: FitAlqLevels or
// FitAmqLevels with the codec's bits and model.
Result<LevelTable> FitLevelTable(const AdaptiveCodec& codec, const LevelStatistics& stats, uint32_t next_version);
// The same into *out (FitAlqLevelsInto / FitAmqLevelsInto: no allocation
// with the pooled model once out has room).
Status FitLevelTableInto(const AdaptiveCodec& codec, const LevelStatistics& stats, uint32_t next_version,
                         LevelTable* out);

// Creates an `alq` or `amq` codec from its spec string ("alq:bits=3,b=1024").
// Other codec names are kInvalidArgument. MakeCodec creates the same codecs
// behind the plain Codec interface.
Result<std::unique_ptr<AdaptiveCodec>> MakeAdaptiveCodec(const std::string& spec);

// The AdaptiveCodec behind an `alq` or `amq` codec from MakeCodec or
// ConstructCodec (they build the same class), so a sender can keep one in
// caller storage and install each round's table; null for other codecs.
AdaptiveCodec* AsAdaptiveCodec(Codec* codec);

}  // namespace fedrt

#endif  // FEDRT_CODECS_ADAPTIVE_H_
