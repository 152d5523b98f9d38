// The stack each codec call takes on the board: encode and decode of a
// vector the size of the firmware example's model (mlp:784-16-10, 12,730
// parameters), measured by painting the stack before the call and finding
// the deepest overwritten word after it (board_stack_mark). Prints one line
// per codec (the table in the README's "Firmware" section) and checks the
// budgets: topk below 4 KiB (issue: "topk under 4 KB"), and every call
// within half the board's 64 KiB stack, leaving the rest to the device
// engine and the training step. (DQSG and NDQSG with rANS take about 19 KiB
// to encode: the next thing to shrink for smaller boards.)
//
// Board only (it needs the board's stack paint): built when the build has a
// board (tests/firmware/CMakeLists.txt).
#include <cstdint>
#include <cstdio>
#include <vector>

#include "board.h"
#include "fedrt/codecs/codec.h"
#include "golden_input.h"
#include "mini_test.h"

namespace {

constexpr std::size_t kModelParameters = 784 * 16 + 16 + 16 * 10 + 10;  // mlp:784-16-10

struct Stack {
  std::size_t encode = 0;
  std::size_t decode = 0;
};

// The codec is made (on the heap) outside the measured calls.
Stack MeasureCodec(const char* spec) {
  const std::size_t d = kModelParameters;
  const std::vector<float> input = fedrt::testing::GoldenInput(d);
  const std::vector<float> side = fedrt::testing::GoldenSideInfo(input);
  const fedrt::CodecContext context = fedrt::testing::GoldenContext();
  Stack stack;
  auto codec = fedrt::MakeCodec(spec);
  if (!codec.ok()) {
    std::printf("  %s: %s\n", spec, codec.status().ToString().c_str());
    return stack;
  }
  std::vector<uint8_t> payload((*codec)->MaxEncodedSize(d));
  std::vector<float> decoded(d);
  const float* y = (*codec)->needs_side_info() ? side.data() : nullptr;

  std::size_t mark = board_stack_mark();
  auto size = (*codec)->Encode(input.data(), d, context, payload.data(), payload.size());
  stack.encode = board_stack_high_water() - mark;
  if (!size.ok()) return Stack{};
  mark = board_stack_mark();
  const fedrt::Status decoded_status = (*codec)->Decode(payload.data(), *size, context, decoded.data(), d, y);
  stack.decode = board_stack_high_water() - mark;
  if (!decoded_status.ok()) return Stack{};
  std::printf("  stack of %-22s encode %5u bytes, decode %5u bytes (d = %u, payload %u bytes)\n", spec,
              static_cast<unsigned>(stack.encode), static_cast<unsigned>(stack.decode), static_cast<unsigned>(d),
              static_cast<unsigned>(*size));
  return stack;
}

void CheckCodec(const char* spec) {
  const Stack stack = MeasureCodec(spec);
  CHECK(stack.encode > 0);
  CHECK(stack.decode > 0);
  CHECK(stack.encode <= board_stack_size() / 2);
  CHECK(stack.decode <= board_stack_size() / 2);
}

TEST("fp32 encode and decode stack on the board") { CheckCodec("fp32"); }
TEST("fp16 encode and decode stack on the board") { CheckCodec("fp16"); }
TEST("dqsg encode and decode stack on the board") { CheckCodec("dqsg:s=2"); }
TEST("dqsg with packed symbols: encode and decode stack on the board") { CheckCodec("dqsg:s=2,ec=pack"); }
TEST("ndqsg encode and decode stack on the board") { CheckCodec("ndqsg:s1=3,rho=3"); }
TEST("topk encodes within 4 KiB of stack on the board") {
  const Stack stack = MeasureCodec("topk:k=0.05");
  CHECK(stack.encode > 0);
  CHECK(stack.encode < 4096);
  CHECK(stack.decode > 0);
  CHECK(stack.decode < 4096);
}

}  // namespace
