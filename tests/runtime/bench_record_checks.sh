#!/usr/bin/env bash
# Sourced by the bench scripts' --record tests: the checks every recorded
# section must pass (runtime/bench/record.sh writes them).
#
#   check_record_section OUT MD TITLE_REGEX COMMAND HEADER
#     OUT: the script's output; MD: the results file; TITLE_REGEX: the
#     section title (an extended regex, without the date); COMMAND: the
#     command line it must name; HEADER: the table's header row.
# Calls `fail MESSAGE` (the test's) on the first check that does not hold.
check_record_section() {
  local out="$1" md="$2" title="$3" command="$4" header="$5"
  grep -q "recorded in $md" "$out" || fail "no 'recorded in' line"
  [ "$(head -n 1 "$md")" = "# Benchmark results" ] || fail "no heading"
  grep -Eq "^## $title \\([0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2} UTC\\)\$" "$md" || fail "no dated section"
  grep -qF -- "- command: \`$command\`" "$md" || fail "no command"
  grep -Eq '^- fedrt [0-9].*cores; load average [0-9.]+ [0-9.]+ [0-9.]+ before, [0-9.]+ [0-9.]+ [0-9.]+ after$' "$md" ||
    fail "no machine line"
  grep -qxF -- "$header" "$md" || fail "no table header"
  grep -qx -- "$(printf '%s\n' "$header" | sed 's/[^|]*|/---|/g; s/^---|/|/')" "$md" || fail "no separator row"
}
