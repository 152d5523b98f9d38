#!/usr/bin/env bash
# Sourced by the bench scripts: records their results in docs/benchmarks/ in
# the shape `fedrt bench ... --record FILE` writes (runtime/cli/bench_record.h):
# one dated section per run with the command, the fedrt version, the machine
# and the load average before and after, then a markdown table.
#
#   bench_record_parse "$@"; set -- "${BENCH_ARGS[@]}"
#     BENCH_RECORD: 1 when $1 is --record or FEDRT_BENCH_RECORD=1, else 0;
#     BENCH_ARGS: the arguments without --record
#   bench_record FILE TITLE COMMAND LOAD_BEFORE FEDRT < table
#     FILE: a path, or a name under docs/benchmarks/ (allreduce.md; the
#     directory FEDRT_BENCH_RECORD_DIR instead, if set);
#     the table on stdin: markdown rows, the first one the header.
# Expected output: "recorded in FILE" on stderr.

bench_record_parse() {
  BENCH_RECORD=0
  [ "${FEDRT_BENCH_RECORD:-0}" != "1" ] || BENCH_RECORD=1
  BENCH_ARGS=("$@")
  if [ "${1:-}" = "--record" ]; then
    BENCH_RECORD=1
    BENCH_ARGS=("${@:2}")
  fi
}

bench_record() {
  local file="$1" title="$2" command="$3" load_before="$4" fedrt="$5"
  local here
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  case "$file" in
    */*) ;;
    *) file="${FEDRT_BENCH_RECORD_DIR:-$here/../../docs/benchmarks}/$file" ;;
  esac
  local version cpu
  version="$("$fedrt" --version 2>/dev/null || echo "fedrt ?")"
  cpu="$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)"
  local table
  table="$(cat)"
  {
    [ -s "$file" ] || echo "# Benchmark results"
    echo
    echo "## $title ($(date -u '+%Y-%m-%d %H:%M UTC'))"
    echo
    echo "- command: \`$command\`"
    echo "- $version, CPU ${cpu:-?}, $(nproc) cores; load average $load_before before, $(cut -d' ' -f1-3 /proc/loadavg) after"
    echo
    printf '%s\n' "$table" | head -n 1
    printf '%s\n' "$table" | head -n 1 | sed 's/[^|]*|/---|/g; s/^---|/|/'
    printf '%s\n' "$table" | tail -n +2
  } >> "$file"
  echo "recorded in $file" >&2
}
