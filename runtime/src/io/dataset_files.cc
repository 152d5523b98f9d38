// Data sets by path (fedrt/runtime/dataset.h, LoadDataSet): MNIST-style IDX
// directories, NumPy (.npz file or a directory of four .npy files) and CSV
// (a directory with train.csv and test.csv). POSIX files; the NumPy and CSV
// bytes are untrusted like the IDX ones: every shape, type, label and field
// is checked before a Dataset is made.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>

#include "fedrt/platform/config.h"
#include "fedrt/runtime/dataset.h"
#include "fedrt/runtime/npy.h"
#include "persist/file.h"

namespace fedrt {
namespace {

// Larger data files are not read (4 GiB, clamped to a 32-bit size_t).
constexpr uint64_t kMaxDataFileBytes = uint64_t{4} << 30;

bool IsFile(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

bool IsDirectory(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

std::string WithSlash(const std::string& dir) { return dir.empty() || dir.back() == '/' ? dir : dir + "/"; }

// A label array: integers from 0 to 255, one per example.
Status LabelsFrom(const NpyArray& array, const std::string& name, std::vector<uint8_t>* labels) {
  if (array.shape.size() != 1 && !(array.shape.size() == 2 && array.shape[1] == 1)) {
    return InvalidArgument(name + ": labels must be one integer per example (shape (N,)), not " +
                           std::to_string(array.shape.size()) + "-D");
  }
  const uint64_t n = array.count();
  labels->resize(static_cast<std::size_t>(n));
  for (uint64_t i = 0; i < n; ++i) {
    const uint8_t* p = array.data.data() + i * array.item_size;
    int64_t v = 0;
    switch (array.type) {
      case NpyType::kUint8: v = p[0]; break;
      case NpyType::kInt8: v = static_cast<int8_t>(p[0]); break;
      case NpyType::kInt16: case NpyType::kUint16: case NpyType::kInt32: case NpyType::kUint32:
      case NpyType::kInt64: case NpyType::kUint64: {
        uint64_t raw = 0;
        for (std::size_t b = 0; b < array.item_size; ++b) raw |= static_cast<uint64_t>(p[b]) << (8 * b);
        const bool is_signed = array.type == NpyType::kInt16 || array.type == NpyType::kInt32 ||
                               array.type == NpyType::kInt64;
        const unsigned bits = static_cast<unsigned>(8 * array.item_size);
        if (is_signed && bits < 64 && (raw >> (bits - 1)) != 0) raw |= ~uint64_t{0} << bits;  // sign-extend
        v = static_cast<int64_t>(raw);
        if (!is_signed && raw > 255) v = 256;
        break;
      }
      default:
        return InvalidArgument(name + ": labels must be integers (numpy: y.astype(np.int64)), not float or bytes");
    }
    if (v < 0 || v > 255) {
      return InvalidArgument(name + ": label " + std::to_string(v) + " of example " + std::to_string(i) +
                             " is outside 0..255");
    }
    (*labels)[static_cast<std::size_t>(i)] = static_cast<uint8_t>(v);
  }
  return Status::Ok();
}

// Sets the example shape from a feature array's shape (N, D), (N, H, W) or
// (N, C, H, W).
Status ShapeFrom(const std::vector<uint64_t>& shape, const std::string& name, Dataset* data) {
  if (shape.size() < 2 || shape.size() > 4) {
    return InvalidArgument(name + ": features must be (N, D), (N, H, W) or (N, C, H, W), not " +
                           std::to_string(shape.size()) + "-D");
  }
  for (std::size_t i = 1; i < shape.size(); ++i) {
    if (shape[i] == 0 || shape[i] > (uint64_t{1} << 24)) return InvalidArgument(name + ": a feature dimension is out of range");
  }
  data->count = static_cast<std::size_t>(shape[0]);
  data->channels = shape.size() == 4 ? static_cast<int>(shape[1]) : 1;
  data->height = shape.size() >= 3 ? static_cast<int>(shape[shape.size() - 2]) : 1;
  data->width = static_cast<int>(shape.back());
  return Status::Ok();
}

Status FeaturesFrom(NpyArray array, const std::string& name, Dataset* data) {
  FEDRT_RETURN_IF_ERROR(ShapeFrom(array.shape, name, data));
  if (array.type == NpyType::kUint8) {
    data->pixels = std::move(array.data);
    return Status::Ok();
  }
  if (array.type != NpyType::kFloat32) {
    return InvalidArgument(name + ": features must be float32 or uint8; convert with numpy: x.astype(np.float32)");
  }
  Result<std::vector<float>> floats = NpyFloats(array, name);
  if (!floats.ok()) return floats.status();
  for (std::size_t i = 0; i < floats->size(); ++i) {
    if (!std::isfinite((*floats)[i])) {
      return InvalidArgument(name + ": feature " + std::to_string(i % data->example_size()) + " of example " +
                             std::to_string(i / data->example_size()) + " is not finite");
    }
  }
  data->features = std::move(*floats);
  return Status::Ok();
}

Result<Dataset> DatasetFrom(NpyArray x, const std::string& x_name, const NpyArray& y, const std::string& y_name) {
  Dataset data;
  FEDRT_RETURN_IF_ERROR(FeaturesFrom(std::move(x), x_name, &data));
  FEDRT_RETURN_IF_ERROR(LabelsFrom(y, y_name, &data.labels));
  if (data.labels.size() != data.count) {
    return InvalidArgument(y_name + ": " + std::to_string(data.labels.size()) + " labels for " +
                           std::to_string(data.count) + " examples in " + x_name);
  }
  return data;
}

Result<NpyArray> ReadNpyFile(const std::string& path) {
  Result<std::vector<uint8_t>> bytes =
      persist::ReadWholeFile(path, static_cast<std::size_t>(std::min<uint64_t>(kMaxDataFileBytes, SIZE_MAX)));
  if (!bytes.ok()) return bytes.status();
  if (!LooksLikeNpy(bytes->data(), bytes->size())) return Corrupt(path + ": not a .npy file (bad magic)");
  return ParseNpy(bytes->data(), bytes->size(), path);
}

// Both sets share a class count (the largest label of either, plus one) and
// an example shape.
Result<TrainTestData> Pair(Result<Dataset> train, Result<Dataset> test, const std::string& test_name) {
  if (!train.ok()) return train.status();
  if (!test.ok()) return test.status();
  if (test->example_size() != train->example_size() || test->features.empty() != train->features.empty()) {
    return InvalidArgument(test_name + ": the test examples differ in shape or type from the training examples");
  }
  TrainTestData out;
  out.train = std::move(*train);
  out.test = std::move(*test);
  int max_label = -1;
  for (const Dataset* set : {&out.train, &out.test}) {
    for (uint8_t label : set->labels) max_label = std::max<int>(max_label, label);
  }
  out.train.num_classes = out.test.num_classes = max_label + 1;
  return out;
}

Result<TrainTestData> LoadNpz(const std::string& path) {
  Result<std::vector<uint8_t>> bytes =
      persist::ReadWholeFile(path, static_cast<std::size_t>(std::min<uint64_t>(kMaxDataFileBytes, SIZE_MAX)));
  if (!bytes.ok()) return bytes.status();
  Result<std::vector<NpzMember>> members = ParseNpz(bytes->data(), bytes->size(), path);
  if (!members.ok()) return members.status();
  NpyArray* arrays[4] = {};
  const char* names[4] = {"x_train", "y_train", "x_test", "y_test"};
  for (NpzMember& member : *members) {
    for (int k = 0; k < 4; ++k) {
      if (member.name == names[k]) arrays[k] = &member.array;
    }
  }
  for (int k = 0; k < 4; ++k) {
    if (arrays[k] == nullptr) {
      return InvalidArgument(path + ": a data set .npz holds x_train, y_train, x_test and y_test; '" +
                             std::string(names[k]) + "' is missing");
    }
  }
  return Pair(DatasetFrom(std::move(*arrays[0]), path + ":x_train", *arrays[1], path + ":y_train"),
              DatasetFrom(std::move(*arrays[2]), path + ":x_test", *arrays[3], path + ":y_test"), path + ":x_test");
}

Result<Dataset> LoadNpySet(const std::string& dir, const char* split) {
  const std::string x_path = dir + "x_" + split + ".npy", y_path = dir + "y_" + split + ".npy";
  Result<NpyArray> x = ReadNpyFile(x_path);
  if (!x.ok()) return x.status();
  Result<NpyArray> y = ReadNpyFile(y_path);
  if (!y.ok()) return y.status();
  return DatasetFrom(std::move(*x), x_path, *y, y_path);
}

// One CSV number; false when the field is not one.
bool ParseNumber(const char* begin, const char* end, double* value) {
  while (begin < end && (*begin == ' ' || *begin == '\t')) ++begin;
  while (end > begin && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r')) --end;
  if (begin == end || end - begin > 64) return false;
  char text[65];
  std::memcpy(text, begin, static_cast<std::size_t>(end - begin));
  text[end - begin] = '\0';
  char* stop = nullptr;
  errno = 0;
  *value = std::strtod(text, &stop);
  return stop == text + (end - begin) && errno == 0 && std::isfinite(*value);
}

Result<Dataset> LoadCsv(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    if (!IsFile(path)) return NotFound(path + ": no such file");
    return IoError(path + ": cannot open");
  }
  Dataset data;
  std::vector<float> features;
  std::size_t fields_per_row = 0, line_number = 0;
  bool bytes_only = true;
  std::string line;
  std::vector<double> row;
  while (std::getline(in, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    row.clear();
    const char* p = line.data();
    const char* end = p + line.size();
    bool numeric = true;
    for (;;) {
      const char* comma = std::find(p, end, ',');
      double v = 0;
      if (!ParseNumber(p, comma, &v)) numeric = false;
      row.push_back(v);
      if (comma == end) break;
      p = comma + 1;
    }
    if (!numeric) {
      if (line_number == 1 && data.count == 0) continue;  // a header line
      return InvalidArgument(path + ":" + std::to_string(line_number) + ": a field is not a number");
    }
    if (fields_per_row == 0) fields_per_row = row.size();
    if (row.size() < 2) return InvalidArgument(path + ":" + std::to_string(line_number) + ": needs a label and features");
    if (row.size() != fields_per_row) {
      return InvalidArgument(path + ":" + std::to_string(line_number) + ": " + std::to_string(row.size()) +
                             " fields, the first row has " + std::to_string(fields_per_row));
    }
    const double label = row[0];
    if (label != std::floor(label) || label < 0 || label > 255) {
      return InvalidArgument(path + ":" + std::to_string(line_number) + ": label " + std::to_string(label) +
                             " is not an integer from 0 to 255");
    }
    data.labels.push_back(static_cast<uint8_t>(label));
    for (std::size_t i = 1; i < row.size(); ++i) {
      const double v = row[i];
      if (v != std::floor(v) || v < 0 || v > 255) bytes_only = false;
      features.push_back(static_cast<float>(v));
    }
    ++data.count;
  }
  if (in.bad()) return IoError(path + ": cannot read");
  if (data.count == 0) return InvalidArgument(path + ": no examples");
  data.width = static_cast<int>(fields_per_row - 1);
  if (bytes_only) {
    // Whole numbers 0..255 (pixels, say) are kept as bytes, as IDX images are.
    data.pixels.assign(features.begin(), features.end());
  } else {
    data.features = std::move(features);
  }
  return data;
}

}  // namespace

Result<DataSetKind> DataSetKindOf(const std::string& path) {
  if (IsDirectory(path)) {
    const std::string dir = WithSlash(path);
    if (IsFile(dir + "x_train.npy")) return DataSetKind::kNpyDirectory;
    if (IsFile(dir + "train.csv")) return DataSetKind::kCsvDirectory;
    return DataSetKind::kIdxDirectory;
  }
  if (IsFile(path)) {
    std::ifstream in(path, std::ios::binary);
    char head[4] = {};
    in.read(head, sizeof(head));
    if (LooksLikeZip(reinterpret_cast<const uint8_t*>(head), static_cast<std::size_t>(in.gcount()))) {
      return DataSetKind::kNpz;
    }
    return InvalidArgument(path + ": a data set file must be an .npz with x_train, y_train, x_test and y_test; "
                                  "other forms are directories (IDX files, x_train.npy ..., or train.csv and test.csv)");
  }
  // Nothing there: the IDX directory's error names the file it looked for.
  return DataSetKind::kIdxDirectory;
}

Result<TrainTestData> LoadDataSet(const std::string& path) {
  Result<DataSetKind> kind = DataSetKindOf(path);
  if (!kind.ok()) return kind.status();
  const std::string dir = WithSlash(path);
  switch (*kind) {
    case DataSetKind::kIdxDirectory:
      return LoadMnistStyleDirectory(path);
    case DataSetKind::kNpz:
      return LoadNpz(path);
    case DataSetKind::kNpyDirectory:
      return Pair(LoadNpySet(dir, "train"), LoadNpySet(dir, "test"), dir + "x_test.npy");
    case DataSetKind::kCsvDirectory:
      return Pair(LoadCsv(dir + "train.csv"), LoadCsv(dir + "test.csv"), dir + "test.csv");
  }
  return InvalidArgument(path + ": unknown data set kind");
}

}  // namespace fedrt
