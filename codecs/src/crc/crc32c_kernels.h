// CRC32C kernel family (Castagnoli polynomial, reflected; used for payload
// integrity). Every variant returns the same value for the same bytes:
//   scalar  table lookups: slicing-by-8 (8 KiB of tables), one table per
//           byte (1 KiB) or nibbles (64 bytes), chosen at build time by
//           FEDRT_CRC32C (crc32c_scalar.cc); the three are tested equal
//   avx2    the SSE4.2 crc32 instruction, 8 bytes at a time (every CPU with
//           AVX2 has SSE4.2; the AVX2 object library is built with -msse4.2)
// The functions take and return the raw (non-inverted) register value; the
// public Crc32c() in payload.h applies the standard pre- and post-inversion.
#ifndef FEDRT_CODECS_CRC_CRC32C_KERNELS_H_
#define FEDRT_CODECS_CRC_CRC32C_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "fedrt/platform/cpu.h"

namespace fedrt {

using Crc32cUpdateFn = uint32_t (*)(uint32_t state, const uint8_t* data, std::size_t size);

namespace scalar {
// The build's choice among the three below (FEDRT_CRC32C).
uint32_t Crc32cUpdate(uint32_t state, const uint8_t* data, std::size_t size);
uint32_t Crc32cUpdateSlice8(uint32_t state, const uint8_t* data, std::size_t size);
uint32_t Crc32cUpdateByte(uint32_t state, const uint8_t* data, std::size_t size);
uint32_t Crc32cUpdateNibble(uint32_t state, const uint8_t* data, std::size_t size);
}
namespace avx2 {
uint32_t Crc32cUpdate(uint32_t state, const uint8_t* data, std::size_t size);
}

Crc32cUpdateFn Crc32cUpdateFor(Isa isa);

}  // namespace fedrt

#endif  // FEDRT_CODECS_CRC_CRC32C_KERNELS_H_
