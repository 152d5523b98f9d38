#include "check.h"

#include <stdio.h>
#include <stdlib.h>

static int checks_run = 0;
static int checks_failed = 0;

int check_report(int ok, const char* text, const char* file, int line) {
  ++checks_run;
  if (!ok) ++checks_failed;
  printf("%s:%d: %s: %s\n", file, line, ok ? "ok" : "FAILED", text);
  fflush(stdout);
  return ok;
}

static void stop(void) {
  printf("required check failed, stopping: %d checks, %d failed\n", checks_run, checks_failed);
  exit(1);
}

void check_require(int ok, const char* text, const char* file, int line) {
  if (!check_report(ok, text, file, line)) stop();
}

int check_status(fedrt_status actual, fedrt_status expected, const char* text, const char* file, int line) {
  const int ok = check_report(actual == expected, text, file, line);
  if (!ok) {
    printf("    got %s, expected %s; last error: %s\n", fedrt_status_name(actual), fedrt_status_name(expected),
           fedrt_last_error());
  }
  return ok;
}

void check_require_ok(fedrt_status actual, const char* text, const char* file, int line) {
  if (!check_status(actual, FEDRT_OK, text, file, line)) stop();
}

int check_finish(void) {
  printf("%d checks, %d failed\n", checks_run, checks_failed);
  return checks_failed == 0 ? 0 : 1;
}
