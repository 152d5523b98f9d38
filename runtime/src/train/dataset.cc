#include "fedrt/runtime/dataset.h"

#include <cmath>
#include <cstring>
#include <numeric>

#include <sys/stat.h>

#include "fedrt/platform/config.h"
#include "train/random.h"

namespace fedrt {
namespace {

constexpr uint64_t kShuffleStream = 2;  // Rng stream of epoch shuffles

bool IsFile(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

}  // namespace

std::string MnistStyleFile(const std::string& directory, const std::string& name) {
  // "train-images-idx3-ubyte" as Fashion-MNIST ships it, or with a dot before
  // "idx" ("train-images.idx3-ubyte") as other copies of MNIST are named; each
  // gzipped or not, the form this build reads first when both are there
  // (with zlib the .gz, without it the plain file, which gunzip -k leaves
  // beside it). None: the .gz path, which the NotFound then names.
  const std::string dir = directory.empty() || directory.back() == '/' ? directory : directory + "/";
  std::string dotted = name;
  const std::size_t idx = dotted.rfind("-idx");
  if (idx != std::string::npos) dotted[idx] = '.';
  for (const std::string& stem : {name, dotted}) {
    const std::string gz = dir + stem + ".gz", plain = dir + stem;
    const std::string& first = FEDRT_HAVE_ZLIB ? gz : plain;
    const std::string& second = FEDRT_HAVE_ZLIB ? plain : gz;
    if (IsFile(first)) return first;
    if (IsFile(second)) return second;
  }
  return dir + name + ".gz";
}

Result<Dataset> LoadIdxDataset(const std::string& images_path, const std::string& labels_path) {
  Result<IdxArray> images = ReadIdxFile(images_path);
  if (!images.ok()) return images.status();
  Result<IdxArray> labels = ReadIdxFile(labels_path);
  if (!labels.ok()) return labels.status();
  if (images->dims.size() != 3) {
    return Corrupt(images_path + ": images must have 3 dimensions (count, rows, columns), not " +
                   std::to_string(images->dims.size()));
  }
  if (labels->dims.size() != 1) return Corrupt(labels_path + ": labels must have 1 dimension");
  if (labels->dims[0] != images->dims[0]) {
    return Corrupt(labels_path + ": " + std::to_string(labels->dims[0]) + " labels for " +
                   std::to_string(images->dims[0]) + " images in " + images_path);
  }
  if (images->dims[1] == 0 || images->dims[2] == 0 || images->dims[1] > 65536 || images->dims[2] > 65536) {
    return Corrupt(images_path + ": image size " + std::to_string(images->dims[1]) + "x" +
                   std::to_string(images->dims[2]) + " is out of range");
  }
  Dataset data;
  data.count = images->dims[0];
  data.height = static_cast<int>(images->dims[1]);
  data.width = static_cast<int>(images->dims[2]);
  data.pixels = std::move(images->data);
  data.labels = std::move(labels->data);
  int max_label = -1;
  for (uint8_t label : data.labels) max_label = label > max_label ? label : max_label;
  data.num_classes = max_label + 1;
  return data;
}

Result<TrainTestData> LoadMnistStyleDirectory(const std::string& directory) {
  const std::string& dir = directory;
  TrainTestData out;
  Result<Dataset> train = LoadIdxDataset(MnistStyleFile(dir, "train-images-idx3-ubyte"),
                                         MnistStyleFile(dir, "train-labels-idx1-ubyte"));
  if (!train.ok()) return train.status();
  const std::string test_images = MnistStyleFile(dir, "t10k-images-idx3-ubyte");
  Result<Dataset> test = LoadIdxDataset(test_images, MnistStyleFile(dir, "t10k-labels-idx1-ubyte"));
  if (!test.ok()) return test.status();
  if (test->height != train->height || test->width != train->width) {
    return Corrupt(test_images + ": image size differs from the training images");
  }
  out.train = std::move(train).value();
  out.test = std::move(test).value();
  const int classes = out.train.num_classes > out.test.num_classes ? out.train.num_classes : out.test.num_classes;
  out.train.num_classes = out.test.num_classes = classes;
  return out;
}

void FeatureTable(const Normalization& n, float table[256]) {
  const float scale = 1.0f / n.stddev;
  for (int v = 0; v < 256; ++v) {
    const float x = static_cast<float>(v) * (1.0f / 255.0f);
    table[v] = (x - n.mean) * scale;
  }
}

NormalizationAccumulator::NormalizationAccumulator(const Normalization& current) { FeatureTable(current, table_); }

void NormalizationAccumulator::Add(const uint8_t* bytes, std::size_t count) {
  // Summed in file order, as over a float copy: the same mean and deviation
  // bits as before the bytes were kept.
  for (std::size_t i = 0; i < count; ++i) {
    const float x = table_[bytes[i]];
    sum_ += x;
    sum2_ += static_cast<double>(x) * x;
  }
  count_ += count;
}

Normalization NormalizationAccumulator::Result() const {
  Normalization n;
  if (count_ == 0) return n;
  const double count = static_cast<double>(count_);
  const double mean = sum_ / count;
  const double var = sum2_ / count - mean * mean;
  n.mean = static_cast<float>(mean);
  n.stddev = var > 1e-12 ? static_cast<float>(std::sqrt(var)) : 1.0f;
  return n;
}

Normalization ComputeNormalization(const Dataset& data) {
  if (!data.features.empty()) {
    // Float features: their mean and deviation as they are.
    double sum = 0.0, sum2 = 0.0;
    for (float x : data.features) {
      sum += x;
      sum2 += static_cast<double>(x) * x;
    }
    const double count = static_cast<double>(data.features.size());
    Normalization out;
    out.mean = static_cast<float>(sum / count);
    const double var = sum2 / count - (sum / count) * (sum / count);
    out.stddev = var > 1e-12 ? static_cast<float>(std::sqrt(var)) : 1.0f;
    return out;
  }
  NormalizationAccumulator sums(data.normalization);
  sums.Add(data.pixels.data(), data.pixels.size());
  return sums.Result();
}

void Normalize(Dataset& data, const Normalization& n) { data.normalization = n; }

void NormalizeWithTrainingSet(TrainTestData& data) {
  const Normalization n = ComputeNormalization(data.train);
  for (Dataset* set : {&data.train, &data.test}) {
    if (set->features.empty()) {
      Normalize(*set, n);
      continue;
    }
    const float scale = 1.0f / n.stddev;
    for (float& x : set->features) x = (x - n.mean) * scale;
  }
}

std::vector<uint32_t> ShuffledIndices(std::size_t count, uint64_t seed, uint64_t epoch) {
  std::vector<uint32_t> order(count);
  ShuffleIndicesInto(order.data(), count, seed, epoch);
  return order;
}

void ShuffleIndicesInto(uint32_t* order, std::size_t count, uint64_t seed, uint64_t epoch) {
  std::iota(order, order + count, 0u);
  Rng rng(seed ^ (epoch * 0x9E3779B97F4A7C15ull), kShuffleStream);
  rng.Shuffle(order, count);
}

DataView::DataView(const Dataset& data)
    : count(data.count), example_size(data.example_size()), num_classes(data.num_classes),
      pixels(data.features.empty() ? data.pixels.data() : nullptr),
      features(data.features.empty() ? nullptr : data.features.data()), normalization(data.normalization),
      labels(data.labels.data()) {}

Status DataView::Validate() const {
  if (count == 0) return InvalidArgument("the data view holds no examples");
  if (example_size == 0) return InvalidArgument("the data view's examples have no features");
  if (labels == nullptr) return InvalidArgument("the data view has no labels");
  if ((pixels == nullptr) == (features == nullptr)) {
    return InvalidArgument("a data view sets exactly one of its byte and float features");
  }
  if (num_classes <= 0 || num_classes > 256) return InvalidArgument("the data view's class count is out of range");
  if (pixels != nullptr && !(std::isfinite(normalization.mean) && std::isfinite(normalization.stddev) &&
                             normalization.stddev > 0.0f)) {
    return InvalidArgument("the data view's normalisation needs a finite mean and a positive standard deviation");
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (labels[i] >= num_classes) {
      return InvalidArgument("label " + std::to_string(labels[i]) + " of example " + std::to_string(i) +
                             " is not below the class count " + std::to_string(num_classes));
    }
  }
  return Status::Ok();
}

namespace {

// Writes example `index`'s features, through `table` for byte features.
void ReadExample(const DataView& data, const float* table, std::size_t index, float* out) {
  const std::size_t size = data.example_size;
  if (data.features != nullptr) {
    std::memcpy(out, data.features + index * size, size * sizeof(float));
    return;
  }
  const uint8_t* src = data.pixels + index * size;
  for (std::size_t i = 0; i < size; ++i) out[i] = table[src[i]];
}

}  // namespace

void GatherBatch(const DataView& data, const uint32_t* indices, std::size_t batch, float* features,
                 uint8_t* labels) {
  float table[256];
  FeatureTable(data.normalization, table);
  for (std::size_t n = 0; n < batch; ++n) {
    ReadExample(data, table, indices[n], features + n * data.example_size);
    labels[n] = data.labels[indices[n]];
  }
}

void ReadExamples(const DataView& data, std::size_t first, std::size_t batch, float* features) {
  float table[256];
  FeatureTable(data.normalization, table);
  for (std::size_t n = 0; n < batch; ++n) ReadExample(data, table, first + n, features + n * data.example_size);
}

}  // namespace fedrt
