#!/usr/bin/env bash
# A long fuzzing campaign outside CI: runs the fuzz preset's fuzzers one at a
# time, in chunks, rotating through them until a deadline, then merges what
# each grew into tests/fuzz/corpus/<fuzzer>/ (minimized with -merge=1) and
# prints one line per fuzzer: seconds, executions, coverage at the start and
# the end, crashes.
#
#   tests/fuzz/campaign.sh [--until HH:MM (UTC) | --seconds N] [--chunk SECONDS] [FUZZER...]
#
# Defaults: --seconds 3600, --chunk 900, every fuzzer. Needs the fuzz preset
# built (cmake --workflow --preset fuzz, or cmake --preset fuzz && cmake
# --build --preset fuzz). Each chunk runs as
#   $FEDRT_FUZZ_WRAP <fuzzer> -max_total_time=<chunk> -print_final_stats=1 ...
# with FEDRT_FUZZ_WRAP="nice -n 19" unless set (a shared machine can put a
# lock command in front, so a chunk takes one of its build slots, or a wrapper
# that pauses the fuzzer while measurements run). libFuzzer's -timeout is wall
# time, so a fuzzer that is starved or paused reports a hang that is none:
# FEDRT_FUZZ_TIMEOUT (seconds per input, default 25) raises it for such runs.
# Every crash-, timeout-, oom- or leak- file counts as a crash; slow-unit files
# are kept for a look but do not count.
#
# Work files go to build/fuzz/campaign/: per fuzzer the working corpus
# (seeds from make_seeds plus the repository corpus plus what it finds),
# each chunk's log, and crash-*, timeout-*, oom-* reproducers. results.tsv
# has one line per chunk; the summary sums them. Seconds are wall time of the
# fuzzer process; cpu_seconds (user + system) is what it actually ran, which is
# what counts on a shared machine where it runs at nice 19 behind other work.
set -uo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
build="$root/build/fuzz"
work="$build/campaign"
chunk=900
seconds=3600
until_epoch=""
fuzzers=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --until)
      until_epoch=$(date -u -d "$2" +%s) || exit 2
      # A time of day that has passed today means tomorrow's.
      if (( until_epoch <= $(date +%s) )); then until_epoch=$((until_epoch + 86400)); fi
      shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --chunk) chunk="$2"; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    -*) echo "campaign: unknown option $1" >&2; exit 2 ;;
    *) fuzzers+=("$1"); shift ;;
  esac
done
[[ -n "$until_epoch" ]] || until_epoch=$(( $(date +%s) + seconds ))
if [[ ${#fuzzers[@]} -eq 0 ]]; then
  fuzzers=(transport_frame_fuzzer codec_decode_fuzzer transport_join_fuzzer checkpoint_fuzzer npy_fuzzer
           codec_roundtrip_fuzzer)
fi
wrap=(${FEDRT_FUZZ_WRAP:-nice -n 19})
timeout="${FEDRT_FUZZ_TIMEOUT:-25}"

[[ -x "$build/tests/fuzz/make_seeds" ]] || { echo "campaign: build the fuzz preset first" >&2; exit 1; }
mkdir -p "$work/bin"
"$build/tests/fuzz/make_seeds" "$work/seeds" >/dev/null || { echo "campaign: make_seeds failed" >&2; exit 1; }
for f in "${fuzzers[@]}"; do
  mkdir -p "$work/$f/corpus" "$work/$f/artifacts"
  cp -n "$work/seeds/$f"/* "$work/$f/corpus/" 2>/dev/null || true
  [[ -d "tests/fuzz/corpus/$f" ]] && cp -n "tests/fuzz/corpus/$f"/* "$work/$f/corpus/" 2>/dev/null
done
results="$work/results.tsv"
[[ -f "$results" ]] || printf 'fuzzer\tqueued\tseconds\texecutions\tcov_start\tcov_end\tft_start\tft_end\tcrashes\tcpu_seconds\n' >"$results"

# One chunk of one fuzzer; appends its line to results.tsv.
run_chunk() {
  local f="$1" t="$2" log n started
  n=$(ls "$work/$f"/chunk-*.log 2>/dev/null | wc -l)
  log="$work/$f/chunk-$((n + 1)).log"
  # A private copy of the binary, so a rebuild during the chunk does not pull it away.
  cp "$build/tests/fuzz/$f" "$work/bin/$f.new" && mv "$work/bin/$f.new" "$work/bin/$f"
  started=$(date -u +%H:%M:%S)  # when the chunk was queued (FEDRT_FUZZ_WRAP may wait for a slot)
  local before after
  before=$(ls "$work/$f/artifacts" | grep -cvE '^slow-unit-')
  "${wrap[@]}" /usr/bin/time -f 'campaign: %e seconds, %U user, %S system' "$work/bin/$f" -max_total_time="$t" -print_final_stats=1 -max_len=16384 -timeout="$timeout" \
    -rss_limit_mb=2048 -artifact_prefix="$work/$f/artifacts/" "$work/$f/corpus" >"$log" 2>&1
  after=$(ls "$work/$f/artifacts" | grep -cvE '^slow-unit-')
  local inited last execs secs
  inited=$(grep -m1 -E '^#[0-9]+[[:space:]]+INITED' "$log")
  last=$(grep -E '^#[0-9]+[[:space:]].*cov: ' "$log" | tail -1)
  execs=$(grep -oE 'stat::number_of_executed_units: [0-9]+' "$log" | grep -oE '[0-9]+$')
  secs=$(grep -oE '^campaign: [0-9]+' "$log" | grep -oE '[0-9]+$')  # the fuzzer's own time, not the wait for a slot
  cpu=$(sed -nE 's/^campaign: [0-9.]+ seconds, ([0-9.]+) user, ([0-9.]+) system.*/\1 \2/p' "$log" | awk '{ printf "%d", $1 + $2 }')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$f" "$started" "${secs:-0}" "${execs:-0}" \
    "$(grep -oE 'cov: [0-9]+' <<<"$inited" | grep -oE '[0-9]+')" "$(grep -oE 'cov: [0-9]+' <<<"$last" | grep -oE '[0-9]+')" \
    "$(grep -oE 'ft: [0-9]+' <<<"$inited" | grep -oE '[0-9]+')" "$(grep -oE 'ft: [0-9]+' <<<"$last" | grep -oE '[0-9]+')" \
    "$((after - before))" "${cpu:-0}" >>"$results"
  tail -1 "$results"
}

i=0
while true; do
  left=$(( until_epoch - $(date +%s) ))
  (( left >= 30 )) || break
  f="${fuzzers[$((i % ${#fuzzers[@]}))]}"
  run_chunk "$f" "$(( left < chunk ? left : chunk ))"
  i=$((i + 1))
done

# Keep the grown corpora, minimized: the repository's corpus becomes the
# smallest set of inputs with the working corpus's coverage.
for f in "${fuzzers[@]}"; do
  mkdir -p "tests/fuzz/corpus/$f.merged"
  if "${wrap[@]}" "$work/bin/$f" -merge=1 -max_len=16384 -timeout="$timeout" -rss_limit_mb=2048 "tests/fuzz/corpus/$f.merged" \
       "$work/$f/corpus" >"$work/$f/merge.log" 2>&1; then
    rm -rf "tests/fuzz/corpus/$f" && mv "tests/fuzz/corpus/$f.merged" "tests/fuzz/corpus/$f"
  else
    echo "campaign: merging $f failed (see $work/$f/merge.log)" >&2
    rm -rf "tests/fuzz/corpus/$f.merged"
  fi
done

echo
printf '%-24s %8s %8s %12s %10s %10s %8s  %s\n' fuzzer seconds cpu_s executions cov_start cov_end crashes corpus
for f in "${fuzzers[@]}"; do
  awk -F'\t' -v f="$f" '$1 == f { s += $3; e += $4; c += $9; u += $10; if (first == "") first = $5; last = $6 }
    END { printf "%-24s %8d %8d %12d %10s %10s %8d", f, s, u, e, first, last, c }' "$results"
  printf '  %s files, %s KB\n' "$(ls "tests/fuzz/corpus/$f" 2>/dev/null | wc -l)" "$(du -sk "tests/fuzz/corpus/$f" 2>/dev/null | cut -f1)"
done
