// Labelled training data in memory: the IDX reader (the MNIST / Fashion-MNIST
// format, gzip-compressed or not), NumPy and CSV data sets (LoadDataSet),
// normalisation, and seeded shuffling and batching.
//
// Trust boundary: IDX files are untrusted bytes. ParseIdx validates the
// header, the element type, every dimension and that the payload has exactly
// the announced size (and at most kMaxIdxBytes) before anything else reads
// it; errors name the file and what is wrong. After loading, a Dataset is
// consistent (labels.size() == count, pixels.size() == count * example_size()).
//
// Memory: a Dataset keeps the bytes as the file ships them (one byte per
// pixel) and turns them into float features only when a batch is read
// (GatherBatch, ReadExamples), through a 256-entry table: the feature of
// byte v is (float(v) * (1.0f / 255.0f) - mean) * (1.0f / stddev) in float32,
// the same bits as scaling a float copy to [0, 1] and then normalising it.
//
// File access uses zlib's gz* functions (POSIX files); firmware without a
// file system parses bytes it already has with ParseIdx.
// Thread-safety: plain values and pure functions.
#ifndef FEDRT_RUNTIME_DATASET_H_
#define FEDRT_RUNTIME_DATASET_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fedrt/platform/status.h"

namespace fedrt {

// Decompressed IDX files larger than this are rejected (1 GiB).
inline constexpr std::size_t kMaxIdxBytes = std::size_t{1} << 30;

struct IdxArray {
  std::vector<uint32_t> dims;  // e.g. {60000, 28, 28}
  std::vector<uint8_t> data;   // row-major, unsigned bytes
};

// Parses an IDX image of unsigned bytes (type 0x08, 1 to 4 dimensions).
// `name` (a file name) prefixes every error message.
Result<IdxArray> ParseIdx(const uint8_t* bytes, std::size_t size, const std::string& name);
// Reads a file (gzip-compressed or plain) and parses it. NotFound / IoError
// when it cannot be read, Corrupt when the bytes are not a valid IDX file.
Result<IdxArray> ReadIdxFile(const std::string& path);
// Reads a file as ReadIdxFile does, but hands its rows (slices of the first
// dimension) to `visit` one at a time, in order, instead of keeping them:
// memory is one row, whatever the file's size. `dims` is filled before the
// first row. A truncated or overlong payload is Corrupt (rows already
// visited stay visited); an error from `visit` stops the reading.
Status StreamIdxRows(const std::string& path, std::vector<uint32_t>* dims,
                     const std::function<Status(std::size_t row, const uint8_t* bytes)>& visit);

// Feature mean and standard deviation of a data set (over all values).
struct Normalization {
  float mean = 0.0f;
  float stddev = 1.0f;
};

struct Dataset {
  std::size_t count = 0;
  int channels = 1, height = 1, width = 1;  // example shape
  int num_classes = 0;                      // max label + 1
  std::vector<uint8_t> pixels;              // [count x example_size()], 0..255 as stored
  // Float features [count x example_size()] instead of pixels (NumPy and CSV
  // data sets whose features are not bytes), read as they are (not through
  // `normalization`: NormalizeWithTrainingSet changes them in place).
  // Exactly one of pixels and features is non-empty.
  std::vector<float> features;
  std::vector<uint8_t> labels;              // [count]
  Normalization normalization;              // applied when features are read (Normalize)
  std::size_t example_size() const { return static_cast<std::size_t>(channels) * height * width; }
};

// The feature each byte value stands for under `normalization` (see above).
void FeatureTable(const Normalization& normalization, float table[256]);

// Labelled examples in memory someone else owns: a Dataset, a firmware
// array, an application's buffers. Features are bytes read through a
// normalisation (like a Dataset) or floats read as they are; exactly one of
// `pixels` and `features` is set. The engines (device client, peer trainer,
// aggregator evaluation) and the trainer read data through a view and never
// copy or own it; the memory must outlive every use of the view.
struct DataView {
  DataView() = default;
  DataView(const Dataset& data);  // NOLINT: implicit by design, a Dataset is a view's most common source
  std::size_t count = 0;
  std::size_t example_size = 0;
  int num_classes = 0;
  const uint8_t* pixels = nullptr;   // [count x example_size], read through `normalization`
  const float* features = nullptr;   // [count x example_size], read as they are
  Normalization normalization;
  const uint8_t* labels = nullptr;   // [count], each < num_classes
  // InvalidArgument when a pointer is missing, both feature kinds are set, a
  // label is not below num_classes, or byte features have a normalisation
  // without a finite mean and positive standard deviation (checked once, on
  // entry to an engine).
  Status Validate() const;
};

// Images (N x H x W bytes, read as [0, 1]) and labels (N bytes) from two IDX
// files; the counts must agree.
Result<Dataset> LoadIdxDataset(const std::string& images_path, const std::string& labels_path);

struct TrainTestData {
  Dataset train;
  Dataset test;
};
// The four files of an MNIST-style directory: train-images-idx3-ubyte.gz,
// train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, t10k-labels-idx1-ubyte.gz,
// each gzipped or not (without .gz: what a build without zlib reads; when
// both are there, the form the build reads is taken).
Result<TrainTestData> LoadMnistStyleDirectory(const std::string& directory);
// The path of IDX file `name` ("train-images-idx3-ubyte") in `directory`:
// that name or the dotted one ("train-images.idx3-ubyte"), gzipped (.gz) or
// not, whichever exists (this build's preferred form first); none: the .gz.
std::string MnistStyleFile(const std::string& directory, const std::string& name);

// What `--data` takes (POSIX files; src/io/dataset_files.cc), by what is
// at the path, never by a file's extension:
//   kIdxDirectory  a directory of the four MNIST-style IDX files (above)
//   kNpyDirectory  a directory with x_train.npy, y_train.npy, x_test.npy, y_test.npy
//   kCsvDirectory  a directory with train.csv and test.csv
//   kNpz           a ZIP file (.npz) with arrays x_train, y_train, x_test, y_test
//                  (the layout of Keras' mnist.npz)
// NumPy features are uint8 (read as pixels, v / 255, like IDX images) or
// float32, shaped (N, D), (N, H, W) or (N, C, H, W) (channels first); labels
// are integers 0..255 of shape (N,). A CSV line is one example: the label
// (an integer 0..255), then the features, comma-separated; a first line
// that is not numbers (a header) is skipped. Features that are all whole
// numbers 0..255 are kept as pixels, others as floats. Both sets must have
// the same example shape; the class count is the largest label of either,
// plus one. Errors name the file and what is wrong.
enum class DataSetKind { kIdxDirectory, kNpyDirectory, kCsvDirectory, kNpz };
Result<DataSetKind> DataSetKindOf(const std::string& path);
Result<TrainTestData> LoadDataSet(const std::string& path);

// Mean and standard deviation of the features as the data set reads them now
// (float features: as they are).
Normalization ComputeNormalization(const Dataset& data);
// The same figures over bytes that arrive in pieces (a streamed file): Add
// the bytes in file order, then Result() has ComputeNormalization's bits for
// a data set of those bytes under `current` (the default: none yet).
class NormalizationAccumulator {
 public:
  explicit NormalizationAccumulator(const Normalization& current = Normalization());
  void Add(const uint8_t* bytes, std::size_t count);
  Normalization Result() const;

 private:
  float table_[256];
  double sum_ = 0.0, sum2_ = 0.0;
  std::size_t count_ = 0;
};
// From now on features read x = (v / 255 - mean) / stddev (use the training
// set's figures for the test set too). Replaces an earlier normalisation
// rather than adding to it; the bytes are not touched.
void Normalize(Dataset& data, const Normalization& normalization);
// Both sets normalised with the training set's mean and standard deviation:
// pixels through Normalize, float features in place, once.
void NormalizeWithTrainingSet(TrainTestData& data);

// A permutation of [0, count) that depends only on (seed, epoch).
std::vector<uint32_t> ShuffledIndices(std::size_t count, uint64_t seed, uint64_t epoch);
// The same permutation written into order[0 .. count) (no allocation).
void ShuffleIndicesInto(uint32_t* order, std::size_t count, uint64_t seed, uint64_t epoch);

// Reads examples indices[0 .. batch) as features [batch x example_size()]
// and labels [batch]. Indices must be below data.count.
void GatherBatch(const DataView& data, const uint32_t* indices, std::size_t batch, float* features,
                 uint8_t* labels);
// Reads examples [first, first + batch) as features [batch x example_size()];
// first + batch must not pass data.count.
void ReadExamples(const DataView& data, std::size_t first, std::size_t batch, float* features);

}  // namespace fedrt

#endif  // FEDRT_RUNTIME_DATASET_H_
