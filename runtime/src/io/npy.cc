// NumPy .npy and .npz (ZIP) reading and writing; see fedrt/runtime/npy.h.
#include "fedrt/runtime/npy.h"

#include <cstdlib>
#include <cstring>

#include "fedrt/platform/config.h"
#include "persist/coding.h"

#if FEDRT_HAVE_ZLIB
#include <zlib.h>
#endif

namespace fedrt {
namespace {

constexpr uint8_t kNpyMagic[] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
constexpr uint32_t kZipLocalSignature = 0x04034b50;
constexpr uint32_t kZipCentralSignature = 0x02014b50;
constexpr uint32_t kZipEndSignature = 0x06054b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr std::size_t kZipEndSize = 22;
constexpr std::size_t kMaxNpzMembers = 65535;
// A .npy header is a short dict literal; anything longer is not one we wrote
// or NumPy wrote for an array fedrt can read.
constexpr std::size_t kMaxNpyHeader = 1 << 16;

struct TypeName {
  NpyType type;
  char kind;  // NumPy's type character
  std::size_t size;
};
constexpr TypeName kTypes[] = {
    {NpyType::kFloat32, 'f', 4}, {NpyType::kFloat64, 'f', 8}, {NpyType::kInt8, 'i', 1},  {NpyType::kUint8, 'u', 1},
    {NpyType::kInt16, 'i', 2},   {NpyType::kUint16, 'u', 2},  {NpyType::kInt32, 'i', 4}, {NpyType::kUint32, 'u', 4},
    {NpyType::kInt64, 'i', 8},   {NpyType::kUint64, 'u', 8},
};

std::string Descr(const NpyArray& a) {
  if (a.type == NpyType::kBytes) return "|S" + std::to_string(a.item_size);
  for (const TypeName& t : kTypes) {
    if (t.type == a.type) return std::string(a.item_size == 1 ? "|" : "<") + t.kind + std::to_string(t.size);
  }
  return "?";
}

// The value of `key` in a dict literal, as written: "'<f4'", "False", "(3, 4)".
bool DictValue(const std::string& header, const char* key, std::string* value) {
  const std::string quoted = std::string("'") + key + "'";
  std::size_t at = header.find(quoted);
  if (at == std::string::npos) return false;
  at = header.find(':', at + quoted.size());
  if (at == std::string::npos) return false;
  ++at;
  while (at < header.size() && header[at] == ' ') ++at;
  std::size_t end = at;
  if (end < header.size() && header[end] == '(') {
    end = header.find(')', end);
    if (end == std::string::npos) return false;
    ++end;
  } else if (end < header.size() && header[end] == '\'') {
    end = header.find('\'', end + 1);
    if (end == std::string::npos) return false;
    ++end;
  } else {
    while (end < header.size() && header[end] != ',' && header[end] != '}') ++end;
  }
  *value = header.substr(at, end - at);
  while (!value->empty() && value->back() == ' ') value->pop_back();
  return true;
}

Status ParseDescr(const std::string& descr, const std::string& name, NpyArray* a) {
  // descr is quoted: '<f4', '|u1', '|S12', '>f8'.
  if (descr.size() < 4 || descr.front() != '\'' || descr.back() != '\'') {
    return Corrupt(name + ": .npy header has an unreadable 'descr' " + descr);
  }
  const std::string d = descr.substr(1, descr.size() - 2);
  const char order = d[0];
  const char kind = d[1];
  char* end = nullptr;
  const unsigned long size = std::strtoul(d.c_str() + 2, &end, 10);
  if (*end != '\0' || size == 0) return InvalidArgument(name + ": unsupported array type '" + d + "'");
  if (kind == 'S' && order == '|') {
    a->type = NpyType::kBytes;
    a->item_size = size;
    return Status::Ok();
  }
  if (order == '>' && size > 1) {
    return InvalidArgument(name + ": the array is big-endian ('" + d +
                           "'); convert it with numpy: a.astype(a.dtype.newbyteorder('<'))");
  }
  for (const TypeName& t : kTypes) {
    if (t.kind == kind && t.size == size) {
      a->type = t.type;
      a->item_size = size;
      return Status::Ok();
    }
  }
  return InvalidArgument(name + ": unsupported array type '" + d +
                         "' (fedrt reads float32, float64, integers and byte strings)");
}

Status ParseShape(const std::string& text, const std::string& name, std::vector<uint64_t>* shape) {
  if (text.size() < 2 || text.front() != '(' || text.back() != ')') {
    return Corrupt(name + ": .npy header has an unreadable 'shape' " + text);
  }
  const std::string dims = text.substr(1, text.size() - 2);
  std::size_t at = 0;
  while (at < dims.size()) {
    while (at < dims.size() && (dims[at] == ' ' || dims[at] == ',')) ++at;
    if (at >= dims.size()) break;
    char* end = nullptr;
    const unsigned long long dim = std::strtoull(dims.c_str() + at, &end, 10);
    if (end == dims.c_str() + at) return Corrupt(name + ": bad shape " + text + " in .npy header");
    shape->push_back(dim);
    at = static_cast<std::size_t>(end - dims.c_str());
  }
  return Status::Ok();
}

#if FEDRT_HAVE_ZLIB
uint32_t ZipCrc32(const uint8_t* data, std::size_t size) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (size > 0) {
    const uInt chunk = size > (1u << 30) ? (1u << 30) : static_cast<uInt>(size);
    crc = crc32(crc, data, chunk);
    data += chunk;
    size -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

Status Inflate(const uint8_t* in, std::size_t in_size, std::vector<uint8_t>* out, const std::string& name) {
  z_stream zs;
  std::memset(&zs, 0, sizeof zs);
  if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) return Internal(name + ": zlib inflateInit2 failed");
  zs.next_in = const_cast<Bytef*>(in);
  zs.avail_in = static_cast<uInt>(in_size);
  zs.next_out = out->data();
  zs.avail_out = static_cast<uInt>(out->size());
  const int rc = inflate(&zs, Z_FINISH);
  const bool whole = rc == Z_STREAM_END && zs.total_out == out->size();
  inflateEnd(&zs);
  if (!whole) return Corrupt(name + ": deflated data is damaged or not the announced size");
  return Status::Ok();
}
#endif

}  // namespace

uint64_t NpyArray::count() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

bool LooksLikeNpy(const uint8_t* bytes, std::size_t size) {
  return size >= sizeof kNpyMagic && std::memcmp(bytes, kNpyMagic, sizeof kNpyMagic) == 0;
}

bool LooksLikeZip(const uint8_t* bytes, std::size_t size) {
  // An empty archive starts with the end record.
  return size >= 4 && bytes[0] == 'P' && bytes[1] == 'K' &&
         ((bytes[2] == 3 && bytes[3] == 4) || (bytes[2] == 5 && bytes[3] == 6));
}

Result<NpyArray> ParseNpy(const uint8_t* bytes, std::size_t size, const std::string& name) {
  if (!LooksLikeNpy(bytes, size) || size < 10) return Corrupt(name + ": not a .npy file (bad magic)");
  const uint8_t major = bytes[6];
  std::size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = bytes[8] | (static_cast<std::size_t>(bytes[9]) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (size < 12) return Corrupt(name + ": truncated .npy header");
    header_len = bytes[8] | (static_cast<std::size_t>(bytes[9]) << 8) | (static_cast<std::size_t>(bytes[10]) << 16) |
                 (static_cast<std::size_t>(bytes[11]) << 24);
    offset = 12;
  } else {
    return Unsupported(name + ": .npy format version " + std::to_string(major) + " (fedrt reads 1 to 3)");
  }
  if (header_len > size - offset || header_len > kMaxNpyHeader) return Corrupt(name + ": truncated .npy header");
  const std::string header(reinterpret_cast<const char*>(bytes + offset), header_len);
  NpyArray a;
  std::string descr, fortran, shape;
  if (!DictValue(header, "descr", &descr) || !DictValue(header, "fortran_order", &fortran) ||
      !DictValue(header, "shape", &shape)) {
    return Corrupt(name + ": .npy header lacks 'descr', 'fortran_order' or 'shape': " + header);
  }
  FEDRT_RETURN_IF_ERROR(ParseDescr(descr, name, &a));
  FEDRT_RETURN_IF_ERROR(ParseShape(shape, name, &a.shape));
  uint64_t count = 1;
  for (uint64_t dim : a.shape) {
    if (dim != 0 && count > UINT64_MAX / dim) return Corrupt(name + ": .npy shape " + shape + " overflows");
    count *= dim;
  }
  if (fortran == "True" && a.shape.size() > 1) {
    return InvalidArgument(name + ": the array is in Fortran order; convert it with numpy: np.ascontiguousarray(a)");
  }
  const std::size_t data_at = offset + header_len;
  const uint64_t have = size - data_at;
  if (count > have / a.item_size || have != count * a.item_size) {
    return Corrupt(name + ": .npy data is " + std::to_string(have) + " bytes, the header says " +
                   std::to_string(count) + " items of " + std::to_string(a.item_size) + " bytes");
  }
  a.data.assign(bytes + data_at, bytes + size);
  return a;
}

std::vector<uint8_t> SerializeNpy(const NpyArray& a) {
  std::string dims;
  for (std::size_t i = 0; i < a.shape.size(); ++i) {
    dims += std::to_string(a.shape[i]);
    if (a.shape.size() == 1) dims += ",";  // Python's one-element tuple: "(3,)"
    else if (i + 1 < a.shape.size()) dims += ", ";
  }
  std::string header = "{'descr': '" + Descr(a) + "', 'fortran_order': False, 'shape': (" + dims + ")";
  header += ", }";
  // Pad so that the data starts on a multiple of 64 bytes, ending with '\n'.
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  persist::Writer w;
  w.Bytes(kNpyMagic, sizeof kNpyMagic);
  w.U8(1);
  w.U8(0);
  w.U16(static_cast<uint16_t>(header.size()));
  w.Bytes(header.data(), header.size());
  w.Bytes(a.data.data(), a.data.size());
  return std::move(w).Take();
}

NpyArray Float32Array(const float* values, std::vector<uint64_t> shape) {
  NpyArray a;
  a.type = NpyType::kFloat32;
  a.item_size = 4;
  a.shape = std::move(shape);
  const uint64_t n = a.count();
  persist::Writer w;
  w.F32s(values, static_cast<std::size_t>(n));
  a.data = std::move(w).Take();
  return a;
}

NpyArray BytesScalar(const std::string& text) {
  NpyArray a;
  a.type = NpyType::kBytes;
  a.item_size = text.empty() ? 1 : text.size();
  a.data.assign(text.begin(), text.end());
  if (text.empty()) a.data.push_back(0);
  return a;
}

Result<std::vector<float>> NpyFloats(const NpyArray& a, const std::string& name) {
  if (a.type == NpyType::kFloat64) {
    return InvalidArgument(name + ": the array is float64; fedrt takes float32: convert it with numpy: "
                                  "np.save(path, a.astype(np.float32))");
  }
  if (a.type != NpyType::kFloat32) {
    return InvalidArgument(name + ": the array is '" + Descr(a) + "', fedrt takes float32 here ('<f4')");
  }
  std::vector<float> values;
  persist::Reader r(a.data.data(), a.data.size());
  r.F32s(a.count(), &values);
  if (!r.AtEnd()) return Corrupt(name + ": array data does not match its shape");
  return values;
}

Result<std::vector<NpzMember>> ParseNpz(const uint8_t* bytes, std::size_t size, const std::string& name) {
#if !FEDRT_HAVE_ZLIB
  (void)bytes;
  (void)size;
  return Unsupported(name + ": .npz needs zlib, and this build of fedrt has none (FEDRT_WITH_ZLIB=OFF)");
#else
  if (size < kZipEndSize) return Corrupt(name + ": not a .npz file (too short for a ZIP archive)");
  // The end record sits in the last 22 bytes plus at most a 65535-byte comment.
  std::size_t end_at = size - kZipEndSize;
  const std::size_t lowest = size > kZipEndSize + 65535 ? size - kZipEndSize - 65535 : 0;
  for (;; --end_at) {
    persist::Reader probe(bytes + end_at, 4);
    if (probe.U32() == kZipEndSignature) break;
    if (end_at == lowest) return Corrupt(name + ": not a .npz file (no ZIP end record)");
  }
  persist::Reader end(bytes + end_at + 4, kZipEndSize - 4);
  end.U16();  // this disk
  end.U16();  // the disk holding the directory
  end.U16();  // entries on this disk
  uint64_t entries = end.U16();
  uint64_t dir_size = end.U32();
  uint64_t dir_at = end.U32();
  if (entries == 0xFFFF || dir_size == 0xFFFFFFFF || dir_at == 0xFFFFFFFF) {
    // ZIP64: the locator sits just before the end record.
    if (end_at < 20) return Corrupt(name + ": ZIP64 archive without its locator");
    persist::Reader locator(bytes + end_at - 20, 20);
    if (locator.U32() != kZip64LocatorSignature) return Corrupt(name + ": ZIP64 archive without its locator");
    locator.U32();
    const uint64_t end64_at = locator.U64();
    if (end64_at > size || size - end64_at < 56) return Corrupt(name + ": ZIP64 end record out of the file");
    persist::Reader end64(bytes + end64_at, 56);
    if (end64.U32() != kZip64EndSignature) return Corrupt(name + ": bad ZIP64 end record");
    end64.U64();  // record size
    end64.U16();  // made by
    end64.U16();  // needed
    end64.U32();
    end64.U32();
    end64.U64();
    entries = end64.U64();
    dir_size = end64.U64();
    dir_at = end64.U64();
  }
  if (entries > kMaxNpzMembers) return Corrupt(name + ": " + std::to_string(entries) + " members is too many");
  if (dir_at > size || dir_size > size - dir_at) return Corrupt(name + ": ZIP directory out of the file");
  persist::Reader dir(bytes + dir_at, static_cast<std::size_t>(dir_size));
  std::vector<NpzMember> members;
  for (uint64_t e = 0; e < entries; ++e) {
    if (dir.U32() != kZipCentralSignature) return Corrupt(name + ": damaged ZIP directory");
    dir.U16();  // made by
    dir.U16();  // needed
    const uint16_t flags = dir.U16();
    const uint16_t method = dir.U16();
    dir.U32();  // time and date
    const uint32_t crc = dir.U32();
    uint64_t packed = dir.U32();
    uint64_t unpacked = dir.U32();
    const uint16_t name_len = dir.U16();
    const uint16_t extra_len = dir.U16();
    const uint16_t comment_len = dir.U16();
    dir.U16();  // disk
    dir.U16();  // internal attributes
    dir.U32();  // external attributes
    uint64_t local_at = dir.U32();
    const uint8_t* member_name = dir.Bytes(name_len);
    const uint8_t* extra = dir.Bytes(extra_len);
    dir.Bytes(comment_len);
    if (!dir.ok()) return Corrupt(name + ": truncated ZIP directory");
    // ZIP64 sizes and offset, for the fields that say 0xFFFFFFFF.
    persist::Reader x(extra, extra_len);
    while (x.left() >= 4) {
      const uint16_t id = x.U16();
      const uint16_t len = x.U16();
      const uint8_t* field = x.Bytes(len);
      if (!x.ok()) break;
      if (id != 1) continue;
      persist::Reader z(field, len);
      if (unpacked == 0xFFFFFFFF) unpacked = z.U64();
      if (packed == 0xFFFFFFFF) packed = z.U64();
      if (local_at == 0xFFFFFFFF) local_at = z.U64();
      if (!z.ok()) return Corrupt(name + ": damaged ZIP64 field");
    }
    std::string member(reinterpret_cast<const char*>(member_name), name_len);
    const std::string where = name + ": member " + member;
    if (flags & 1) return Unsupported(where + " is encrypted");
    if (method != 0 && method != 8) {
      return Unsupported(where + " uses ZIP method " + std::to_string(method) + " (fedrt reads stored and deflated)");
    }
    if (local_at > size || size - local_at < 30) return Corrupt(where + ": local header out of the file");
    persist::Reader local(bytes + local_at, 30);
    if (local.U32() != kZipLocalSignature) return Corrupt(where + ": bad local header");
    for (int i = 0; i < 11; ++i) local.U16();  // versions, flags, method, time, date, CRC, sizes
    const uint16_t local_name_len = local.U16();
    const uint16_t local_extra_len = local.U16();
    const uint64_t data_at = local_at + 30 + local_name_len + local_extra_len;
    if (data_at > size || packed > size - data_at) return Corrupt(where + ": data out of the file");
    // Deflate expands at most about 1032 times; a larger claim is a lie.
    if (unpacked > (method == 0 ? packed : packed * 1032 + 64)) {
      return Corrupt(where + ": announced size " + std::to_string(unpacked) + " does not fit its data");
    }
    std::vector<uint8_t> data;
    if (method == 0) {
      if (packed != unpacked) return Corrupt(where + ": stored sizes differ");
      data.assign(bytes + data_at, bytes + data_at + packed);
    } else {
      data.resize(static_cast<std::size_t>(unpacked));
      FEDRT_RETURN_IF_ERROR(Inflate(bytes + data_at, static_cast<std::size_t>(packed), &data, where));
    }
    if (ZipCrc32(data.data(), data.size()) != crc) return Corrupt(where + ": CRC-32 mismatch (damaged file)");
    if (member.size() > 4 && member.compare(member.size() - 4, 4, ".npy") == 0) member.resize(member.size() - 4);
    auto array = ParseNpy(data.data(), data.size(), name + ": " + member);
    FEDRT_RETURN_IF_ERROR(array.status());
    members.push_back({std::move(member), std::move(*array)});
  }
  return members;
#endif
}

Result<std::vector<uint8_t>> SerializeNpz(const std::vector<NpzMember>& members) {
#if !FEDRT_HAVE_ZLIB
  (void)members;
  return Unsupported(".npz needs zlib, and this build of fedrt has none (FEDRT_WITH_ZLIB=OFF)");
#else
  if (members.size() > kMaxNpzMembers) return InvalidArgument("too many arrays for one .npz");
  persist::Writer w;
  persist::Writer dir;
  constexpr uint16_t kVersion = 20;   // ZIP 2.0: stored members
  constexpr uint16_t kDosDate = 0x21;  // 1980-01-01: reproducible bytes
  for (const NpzMember& m : members) {
    const std::vector<uint8_t> npy = SerializeNpy(m.array);
    const std::string file = m.name + ".npy";
    const uint64_t at = w.size();
    if (npy.size() > 0xFFFFFFFEu || at > 0xFFFFFFFEu || file.size() > 0xFFFF) {
      return InvalidArgument("the .npz would exceed 4 GiB (fedrt does not write ZIP64)");
    }
    const uint32_t crc = ZipCrc32(npy.data(), npy.size());
    w.U32(kZipLocalSignature);
    w.U16(kVersion);
    w.U16(0);  // flags
    w.U16(0);  // stored
    w.U16(0);  // time
    w.U16(kDosDate);
    w.U32(crc);
    w.U32(static_cast<uint32_t>(npy.size()));
    w.U32(static_cast<uint32_t>(npy.size()));
    w.U16(static_cast<uint16_t>(file.size()));
    w.U16(0);  // extra
    w.Bytes(file.data(), file.size());
    w.Bytes(npy.data(), npy.size());
    dir.U32(kZipCentralSignature);
    dir.U16(kVersion);  // made by: MS-DOS, ZIP 2.0
    dir.U16(kVersion);
    dir.U16(0);
    dir.U16(0);
    dir.U16(0);
    dir.U16(kDosDate);
    dir.U32(crc);
    dir.U32(static_cast<uint32_t>(npy.size()));
    dir.U32(static_cast<uint32_t>(npy.size()));
    dir.U16(static_cast<uint16_t>(file.size()));
    dir.U16(0);  // extra
    dir.U16(0);  // comment
    dir.U16(0);  // disk
    dir.U16(0);  // internal attributes
    dir.U32(0);  // external attributes
    dir.U32(static_cast<uint32_t>(at));
    dir.Bytes(file.data(), file.size());
  }
  const std::vector<uint8_t> directory = std::move(dir).Take();
  const uint64_t dir_at = w.size();
  if (dir_at + directory.size() > 0xFFFFFFFEu) {
    return InvalidArgument("the .npz would exceed 4 GiB (fedrt does not write ZIP64)");
  }
  w.Bytes(directory.data(), directory.size());
  w.U32(kZipEndSignature);
  w.U16(0);
  w.U16(0);
  w.U16(static_cast<uint16_t>(members.size()));
  w.U16(static_cast<uint16_t>(members.size()));
  w.U32(static_cast<uint32_t>(directory.size()));
  w.U32(static_cast<uint32_t>(dir_at));
  w.U16(0);  // comment
  return std::move(w).Take();
#endif
}

}  // namespace fedrt
