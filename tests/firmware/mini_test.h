// A test runner small enough for a microcontroller: no exceptions, no
// iostreams, no files. Each TEST registers a function; CHECK records a
// failure and goes on, REQUIRE returns from the test. main() (mini_test.cc)
// runs every test, prints one line each through printf (semihosting on the
// board, stdout on a host) and returns the number of failed tests, which is
// the program's exit status under QEMU.
//
// The same test sources build on the host (tests/CMakeLists.txt), so a test
// that holds expected bytes checks the host and the board against one list.
#ifndef FEDRT_TESTS_FIRMWARE_MINI_TEST_H_
#define FEDRT_TESTS_FIRMWARE_MINI_TEST_H_

#include <cstdio>

namespace mini_test {

using TestFunction = void (*)();
struct Registration {
  Registration(const char* name, TestFunction function);
};
// Records a failed check of the running test and prints where it was.
void Fail(const char* file, int line, const char* expression);

}  // namespace mini_test

#define MINI_TEST_CONCAT2(a, b) a##b
#define MINI_TEST_CONCAT(a, b) MINI_TEST_CONCAT2(a, b)
#define TEST(name)                                                                                   \
  static void MINI_TEST_CONCAT(mini_test_function_, __LINE__)();                                     \
  static const mini_test::Registration MINI_TEST_CONCAT(mini_test_registration_, __LINE__)(          \
      name, &MINI_TEST_CONCAT(mini_test_function_, __LINE__));                                        \
  static void MINI_TEST_CONCAT(mini_test_function_, __LINE__)()
#define CHECK(expression) \
  ((expression) ? static_cast<void>(0) : mini_test::Fail(__FILE__, __LINE__, #expression))
#define REQUIRE(expression)                              \
  do {                                                   \
    if (!(expression)) {                                 \
      mini_test::Fail(__FILE__, __LINE__, #expression); \
      return;                                            \
    }                                                    \
  } while (0)

#endif  // FEDRT_TESTS_FIRMWARE_MINI_TEST_H_
