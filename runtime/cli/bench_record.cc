#include "cli/bench_record.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

#include "fedrt/platform/cpu.h"
#include "fedrt/runtime/build_info.h"

namespace fedrt::cli {
namespace {

std::string g_command_line = "fedrt";

// A shell word as the user could type it again.
std::string Quoted(const std::string& word) {
  if (!word.empty() && word.find_first_of(" \t\"'$`\\|&;<>()*?[]{}") == std::string::npos) return word;
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// A markdown table cell: the pipe is the only character that breaks one.
std::string Cell(const std::string& text) {
  std::string cell;
  for (char c : text) cell += c == '|' ? std::string("\\|") : std::string(1, c);
  return cell;
}

}  // namespace

void RememberCommandLine(int argc, char** argv) {
  g_command_line = "fedrt";
  for (int i = 1; i < argc; ++i) g_command_line += " " + Quoted(argv[i]);
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  if (!(in >> a >> b >> c)) return "?";
  return a + " " + b + " " + c;
}

Status AppendBenchRecord(const std::string& path, const BenchRecord& record) {
  bool fresh = true;
  {
    std::ifstream existing(path, std::ios::binary | std::ios::ate);
    fresh = !existing || existing.tellg() <= 0;
  }
  std::ostringstream md;
  if (fresh) md << "# Benchmark results\n";
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", &utc);
  md << "\n## " << record.title << " (" << date << ")\n\n";
  md << "- command: `" << g_command_line << "`\n";
  md << "- fedrt " << VersionString() << ", CPU " << (DetectCpu().model.empty() ? std::string("?") : DetectCpu().model) << ", " << ::sysconf(_SC_NPROCESSORS_ONLN)
     << " cores; load average " << record.load_before << " before, " << LoadAverage() << " after\n\n";
  md << "|";
  for (const std::string& column : record.columns) md << " " << Cell(column) << " |";
  md << "\n|";
  for (std::size_t i = 0; i < record.columns.size(); ++i) md << "---|";
  md << "\n";
  for (const std::vector<std::string>& row : record.rows) {
    md << "|";
    for (const std::string& cell : row) md << " " << Cell(cell) << " |";
    md << "\n";
  }
  std::ofstream out(path, std::ios::app | std::ios::binary);
  if (!out) return IoError(path + ": cannot open for appending: " + std::strerror(errno));
  out << md.str();
  out.flush();
  if (!out) return IoError(path + ": write failed: " + std::strerror(errno));
  return Status::Ok();
}

}  // namespace fedrt::cli
