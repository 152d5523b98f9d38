// The runner's main(): see mini_test.h.
#include "mini_test.h"

#include <cstddef>

#if defined(FEDRT_TEST_ON_BOARD)
#include "board.h"
#endif

namespace mini_test {
namespace {

struct Test {
  const char* name;
  TestFunction function;
};
constexpr int kMaxTests = 64;
Test tests[kMaxTests];
int test_count = 0;
int failures_in_test = 0;

}  // namespace

Registration::Registration(const char* name, TestFunction function) {
  if (test_count < kMaxTests) tests[test_count++] = {name, function};
}

void Fail(const char* file, int line, const char* expression) {
  ++failures_in_test;
  std::printf("  %s:%d: CHECK(%s) failed\n", file, line, expression);
}

}  // namespace mini_test

int main() {
  using namespace mini_test;
  int failed = 0;
  for (int i = 0; i < test_count; ++i) {
    failures_in_test = 0;
    tests[i].function();
    std::printf("%s: %s\n", failures_in_test == 0 ? "passed" : "FAILED", tests[i].name);
    if (failures_in_test != 0) ++failed;
  }
#if defined(FEDRT_TEST_ON_BOARD)
  std::printf("memory: stack high-water %u of %u bytes, heap high-water %u bytes\n",
              static_cast<unsigned>(board_stack_high_water()), static_cast<unsigned>(board_stack_size()),
              static_cast<unsigned>(board_heap_high_water()));
#endif
  std::printf("%d of %d tests failed\n", failed, test_count);
  std::fflush(stdout);
  return failed;
}
