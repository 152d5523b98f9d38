// What fedrt.h promises about the heap and threads, checked from C++:
// after init, the training round path and codec encoding allocate nothing
// (tests/support/allocation_counter.h counts operator new and, on glibc
// builds without AddressSanitizer, the malloc family); init and codec
// creation do allocate, as the header says; fedrt_last_error is per thread.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "allocation_counter.h"
#include "fedrt/fedrt.h"

namespace {

using fedrt::testing::AllocationsDuring;

TEST_CASE("training on caller memory and encoding allocate nothing after init") {
  const char* spec = "cnn:8x8x1-c4k3-p2-d16-4";
  const int batch = 6;
  fedrt_sgd_options sgd = fedrt_sgd_options_default();
  sgd.momentum = 0.9f;
  sgd.clip_norm = 5.0f;
  std::size_t bytes = 0;
  REQUIRE(fedrt_model_size(spec, &sgd, batch, &bytes) == FEDRT_OK);
  std::vector<unsigned char> memory(bytes);
  fedrt_model_t* model = nullptr;
  fedrt_status status = FEDRT_INTERNAL;
  // The bookkeeping, as the header says (and the counter counts).
  CHECK(AllocationsDuring([&] { status = fedrt_model_init(memory.data(), bytes, spec, &sgd, 5, batch, &model); }) > 0);
  REQUIRE(status == FEDRT_OK);

  const std::size_t d = fedrt_model_parameter_count(model);
  std::vector<float> features(static_cast<std::size_t>(batch) * fedrt_model_input_size(model), 0.25f);
  std::vector<uint8_t> labels = {0, 1, 2, 3, 0, 1};
  std::vector<float> parameters(d);
  std::vector<int> predictions(batch);
  std::vector<fedrt_codec_t*> codecs;
  for (const char* codec_spec : {"fp32", "fp16", "qsgd", "qsgd:ec=pack", "dqsg", "dqsg:ec=pack", "ndqsg",
                                 "topk:k=0.1", "rtopk:k=0.1,r=0.5", "moniqua:theta=1"}) {
    fedrt_codec_t* codec = nullptr;
    REQUIRE(fedrt_codec_create(codec_spec, &codec) == FEDRT_OK);
    codecs.push_back(codec);
  }
  std::vector<uint8_t> payload(fedrt_codec_max_encoded_size(codecs[0], d) * 2 + 4096);
  fedrt_codec_context context{7, 1, 0, 3};

  fedrt_batch_loss loss{};
  // What happens once per process first, as the header says: OpenBLAS sets
  // up its buffers on its first call, and the first call that picks kernels
  // detects the CPU (with OpenBLAS as the GEMM that is the first encode).
  REQUIRE(fedrt_model_train_step(model, features.data(), labels.data(), batch, &loss) == FEDRT_OK);
  CHECK(fedrt_isa_name() != nullptr);
  bool ok = true;
  const long allocations = AllocationsDuring([&] {
    for (int step = 0; step < 3; ++step) {
      ok &= fedrt_model_train_step(model, features.data(), labels.data(), batch, &loss) == FEDRT_OK;
      ok &= fedrt_model_train_step(model, features.data(), labels.data(), batch - 2, nullptr) == FEDRT_OK;
    }
    ok &= fedrt_model_evaluate(model, features.data(), labels.data(), batch, &loss, predictions.data()) == FEDRT_OK;
    ok &= fedrt_model_get_parameters(model, parameters.data(), d) == FEDRT_OK;
    ok &= fedrt_model_set_parameters(model, parameters.data(), d) == FEDRT_OK;
    for (fedrt_codec_t* codec : codecs) {
      std::size_t written = 0;
      ok &= fedrt_codec_max_encoded_size(codec, d) <= payload.size();
      ok &= fedrt_codec_encode(codec, parameters.data(), d, &context, payload.data(), payload.size(), &written) ==
            FEDRT_OK;
      context.round++;
    }
  });
  CHECK(ok);
  CHECK(allocations == 0);

  fedrt_codec_t* another = nullptr;
  CHECK(AllocationsDuring([&] { status = fedrt_codec_create("dqsg", &another); }) > 0);
  REQUIRE(status == FEDRT_OK);
  fedrt_codec_destroy(another);
  for (fedrt_codec_t* codec : codecs) fedrt_codec_destroy(codec);
  fedrt_model_destroy(model);
}

TEST_CASE("a codec in caller memory allocates nothing from init to destroy") {
  const std::size_t d = 5000;
  std::vector<float> input(d), side(d, 0.5f), out(d);
  for (std::size_t i = 0; i < d; ++i) input[i] = static_cast<float>(i % 17) * 0.25f - 2.0f;
  fedrt_codec_context context{7, 2, 1, 3};
  (void)fedrt_isa_name();  // the CPU is detected once per process
  for (const char* spec : {"fp32", "fp16", "dqsg", "dqsg:ec=pack", "ndqsg", "topk:k=0.01", "rtopk:k=0.01", "qsgd"}) {
    CAPTURE(std::string(spec));
    std::size_t bytes = 0;
    REQUIRE(fedrt_codec_size(spec, d, &bytes) == FEDRT_OK);
    std::vector<unsigned char> memory(bytes);
    std::vector<uint8_t> payload(2 * d * sizeof(float) + 65536);
    bool ok = true;
    const long allocations = AllocationsDuring([&] {
      fedrt_codec_t* codec = nullptr;
      ok &= fedrt_codec_init(memory.data(), bytes, spec, d, &codec) == FEDRT_OK;
      if (!ok) return;
      std::size_t written = 0;
      ok &= fedrt_codec_max_encoded_size(codec, d) <= payload.size();
      ok &= fedrt_codec_encode(codec, input.data(), d, &context, payload.data(), payload.size(), &written) == FEDRT_OK;
      ok &= fedrt_codec_decode(codec, payload.data(), written, &context, side.data(), out.data(), d) == FEDRT_OK;
      ok &= fedrt_codec_decode_accumulate(codec, payload.data(), written, &context, side.data(), 0.5f, out.data(), d) ==
            FEDRT_OK;
      fedrt_codec_destroy(codec);
    });
    CHECK(ok);
    CHECK(allocations == 0);
  }
}

#if FEDRT_TEST_WITH_THREADS
// A build without threads (FEDRT_WITH_THREADS=OFF: the core preset, firmware)
// keeps one message in all.
TEST_CASE("fedrt_last_error is kept per thread") {
  fedrt_codec_t* codec = nullptr;
  REQUIRE(fedrt_codec_create("nosuch", &codec) == FEDRT_INVALID_ARGUMENT);
  const std::string mine = fedrt_last_error();
  CHECK(mine.find("unknown codec 'nosuch'") != std::string::npos);
  std::string theirs_before, theirs_after;
  std::thread other([&] {
    theirs_before = fedrt_last_error();
    std::size_t bytes = 0;
    (void)fedrt_model_size("mlp:3", nullptr, 1, &bytes);
    theirs_after = fedrt_last_error();
  });
  other.join();
  CHECK(theirs_before.empty());
  CHECK(theirs_after.find("mlp:3") != std::string::npos);
  CHECK(std::string(fedrt_last_error()) == mine);
}
#endif

}  // namespace
