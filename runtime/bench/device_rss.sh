#!/usr/bin/env bash
# Peak memory of one `fedrt device` (docs/design/star.md, "Device"): a
# `fedrt serve` of LeNet-300-100 (mlp:784-300-100-10) for ROUNDS rounds of
# CODEC with one device, which trains share 0 of 8 of the training set. The
# device's peak RSS (VmHWM, as /usr/bin/time -v reports it) is printed beside
# its yardstick, `fedrt --version` (the process and its shared libraries
# before it does anything). Run it under a quiet machine (quietslot).
# Usage: runtime/bench/device_rss.sh FEDRT [DATA_DIR [CODEC [ROUNDS]]]
#   DATA_DIR defaults to /usr/share/datasets/fashion-mnist, CODEC to fp32,
#   ROUNDS to 5. Exits non-zero when the run fails.
set -u
F=$(realpath "$1")
data=${2:-/usr/share/datasets/fashion-mnist}
codec=${3:-fp32}
rounds=${4:-5}
model=mlp:784-300-100-10
work=$(mktemp -d)
trap 'kill $serve 2>/dev/null; rm -rf "$work"' EXIT
cd "$work"
"$F" keygen --devices 8 --out keys --prefix dev >/dev/null || exit 1
"$F" serve --key-file keys/keys.txt --host 127.0.0.1 --port 0 --model $model --codec "$codec" \
  --rounds "$rounds" --min-devices 1 --data "$data" --log-level warn >serve.log 2>&1 &
serve=$!
port=
for _ in $(seq 1 600); do
  port=$(sed -n 's/^listening on port \([0-9]*\)$/\1/p' serve.log)
  [[ -n $port ]] && break
  kill -0 $serve 2>/dev/null || { cat serve.log; exit 1; }
  sleep 0.1
done
[[ -n $port ]] || { echo "fedrt serve did not listen"; exit 1; }
peak() { sed -n 's/^\s*Maximum resident set size (kbytes): //p' "$1"; }
/usr/bin/time -v "$F" --version >/dev/null 2>version.time
/usr/bin/time -v "$F" device --server 127.0.0.1:$port --key-file keys/keys/dev0.key --data "$data" --model $model \
  --devices 8 --index 0 --log-level warn >device.log 2>device.time
rc=$?
wait $serve; serve_rc=$?
if [[ $rc != 0 || $serve_rc != 0 ]]; then
  echo "device exit $rc, serve exit $serve_rc"; cat device.log device.time serve.log; exit 1
fi
echo "fedrt --version: peak RSS $(peak version.time) KiB"
echo "fedrt device ($model, share 0 of 8, $codec, $rounds rounds): peak RSS $(peak device.time) KiB" \
     "($(awk -v k="$(peak device.time)" 'BEGIN{printf "%.1f", k / 1024}') MiB)"
grep -E '^round' serve.log | tail -1
