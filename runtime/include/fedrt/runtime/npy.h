// NumPy's .npy and .npz formats: how fedrt exchanges vectors, models and data
// sets with NumPy, PyTorch and the rest of the Python tooling.
//
// A .npy file is one array: a magic string, a header that is a Python dict
// literal ('descr', 'fortran_order', 'shape'), then the raw items. A .npz file
// is a ZIP archive of .npy files, one per named array (`numpy.savez` writes
// them stored, `numpy.savez_compressed` deflated).
//
// Parsing is a trust boundary: every length, the shape's product, the item
// type and (for .npz) each member's CRC-32 are checked before the data is
// used; a file that breaks one of them is kCorrupt naming the file, an array
// of a kind fedrt does not read is kInvalidArgument with a hint how to convert
// it in NumPy (float64, big-endian and Fortran-order arrays).
//
// .npz needs zlib (the ZIP members' CRC-32 and deflate); a build without it
// (FEDRT_WITH_ZLIB=OFF) returns kUnsupported from the .npz functions. The .npy
// functions need nothing.
//
// Thread-safety: plain functions on values.
#ifndef FEDRT_RUNTIME_NPY_H_
#define FEDRT_RUNTIME_NPY_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fedrt/platform/status.h"

namespace fedrt {

// The item types fedrt reads and writes: little-endian numbers and byte strings.
enum class NpyType { kFloat32, kFloat64, kInt8, kUint8, kInt16, kUint16, kInt32, kUint32, kInt64, kUint64, kBytes };

struct NpyArray {
  NpyType type = NpyType::kFloat32;
  std::size_t item_size = 4;    // bytes per item (kBytes: the string length)
  std::vector<uint64_t> shape;  // empty: a scalar (one item)
  std::vector<uint8_t> data;    // the items, C order, little-endian
  uint64_t count() const;       // product of the shape
};

// True when `bytes` starts like a .npy file or a ZIP archive (.npz): files are
// recognised by their first bytes, never by their names.
bool LooksLikeNpy(const uint8_t* bytes, std::size_t size);
bool LooksLikeZip(const uint8_t* bytes, std::size_t size);

// `name` (a file or member name) prefixes error messages.
Result<NpyArray> ParseNpy(const uint8_t* bytes, std::size_t size, const std::string& name);
std::vector<uint8_t> SerializeNpy(const NpyArray& array);

// A float32 array of `shape` holding `values` (count must equal the product).
NpyArray Float32Array(const float* values, std::vector<uint64_t> shape);
// A byte-string scalar ('|S<n>'), as NumPy stores `np.bytes_(text)`.
NpyArray BytesScalar(const std::string& text);
// The items of a float32 array; any other type is kInvalidArgument with a hint.
Result<std::vector<float>> NpyFloats(const NpyArray& array, const std::string& name);

struct NpzMember {
  std::string name;  // without the ".npy" suffix, as numpy.load lists it
  NpyArray array;
};

Result<std::vector<NpzMember>> ParseNpz(const uint8_t* bytes, std::size_t size, const std::string& name);
// Stored (uncompressed) members, readable by numpy.load; kInvalidArgument when
// the archive would exceed 4 GiB (fedrt does not write ZIP64).
Result<std::vector<uint8_t>> SerializeNpz(const std::vector<NpzMember>& members);

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_NPY_H_
