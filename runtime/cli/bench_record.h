// Benchmark results kept where the project keeps them (docs/benchmarks/):
// `fedrt bench codecs --record FILE` and `fedrt bench train --record FILE`
// append one dated section to a markdown file: the command, the fedrt
// version, the machine (CPU, cores, load average before and after) and the
// results as a table. runtime/bench/record.sh writes the same shape for the
// bench scripts, so a results file reads as one history, newest last.
//
// Thread-safety: RememberCommandLine once in main(); the rest from the
// command's thread.
#ifndef FEDRT_RUNTIME_CLI_BENCH_RECORD_H_
#define FEDRT_RUNTIME_CLI_BENCH_RECORD_H_

#include <string>
#include <vector>

#include "fedrt/platform/status.h"

namespace fedrt::cli {

// The command line as typed (quoted where a word needs it), for the record.
void RememberCommandLine(int argc, char** argv);

// The first three fields of /proc/loadavg ("0.52 0.60 0.71"; "?" elsewhere).
std::string LoadAverage();

struct BenchRecord {
  std::string title;        // the section's heading, before the date
  std::string load_before;  // LoadAverage() when the measurement started
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;  // each as many cells as columns
};

// Appends `record` as "## TITLE (YYYY-MM-DD HH:MM UTC)", the facts and the
// table to the markdown file at `path` (a new file gets a "# Benchmark
// results" heading first). The load average after is read here. io_error
// naming the file when it cannot be written.
Status AppendBenchRecord(const std::string& path, const BenchRecord& record);

}  // namespace fedrt::cli

#endif  // FEDRT_RUNTIME_CLI_BENCH_RECORD_H_
