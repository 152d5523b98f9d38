/* A tiny assertion harness for the C API tests (no doctest in C). Each
 * CHECK prints one line, "ok" or "FAILED", with its file, line and text;
 * REQUIRE also stops the test when it fails (for checks the rest depends
 * on). check_finish() prints the count and returns the exit status: non-zero
 * when any check failed, so ctest reports the test as failed.
 *
 * Thread-safety: single-threaded tests only. */
#ifndef FEDRT_TESTS_CAPI_CHECK_H_
#define FEDRT_TESTS_CAPI_CHECK_H_

#include "fedrt/fedrt.h"

/* Records one check; returns `ok`. */
int check_report(int ok, const char* text, const char* file, int line);
/* As check_report, but exits with status 1 when `ok` is 0. */
void check_require(int ok, const char* text, const char* file, int line);
/* Records that `actual` equals `expected`; on a mismatch prints both names
 * and fedrt_last_error(). */
int check_status(fedrt_status actual, fedrt_status expected, const char* text, const char* file, int line);
/* As check_status with FEDRT_OK expected, but exits with status 1 on a
 * mismatch. */
void check_require_ok(fedrt_status actual, const char* text, const char* file, int line);
/* Prints "N checks, M failed" and returns 0 when none failed, else 1. */
int check_finish(void);

#define CHECK(condition) check_report((condition) != 0, #condition, __FILE__, __LINE__)
#define REQUIRE(condition) check_require((condition) != 0, #condition, __FILE__, __LINE__)
#define CHECK_STATUS(call, expected) check_status((call), (expected), #call " == " #expected, __FILE__, __LINE__)
#define REQUIRE_OK(call) check_require_ok((call), #call, __FILE__, __LINE__)

#endif /* FEDRT_TESTS_CAPI_CHECK_H_ */
