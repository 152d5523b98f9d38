#!/usr/bin/env bash
# The round close off the I/O thread (docs/design/star.md, "The close job"):
# the same fleet against two `fedrt serve` binaries, one after the other in
# one run (OLD, e.g. main's, then NEW), each evaluating on the test set and
# writing its checkpoint (fsync'ed) after every round, while /healthz is
# probed every 10 ms on a fresh connection. Reports per binary the /healthz
# latency (p50 / p99 / max), the server's round times (p50 / p99, its
# --metrics file, as `fedrt bench fleet` reads them) and the time from one
# round's report to the next (the round plus its close and the start of the
# next: where a slower cadence would show) and, of that, the gap between a
# report and the next round's start.
# Usage: runtime/bench/fleet_close.sh OLD_FEDRT NEW_FEDRT OUTDIR DEVICES ROUNDS [FRACTION [CODEC]]
# (FRACTION 0.05, CODEC dqsg by default; needs python3 and a hard open-file
# limit above DEVICES + 1000; run it under /work/bin/quietslot or on a quiet
# machine).
set -u
old=$1 new=$2 out=$3 n=$4 rounds=$5 fraction=${6:-0.05} codec=${7:-dqsg}
mkdir -p "$out"; cd "$out"
ulimit -n $((n + 1000))
[[ -f keys/keys.txt ]] || "$new" keygen --devices "$n" --out keys >/dev/null
cat >probe.py <<'PY'
# GET /healthz every 10 ms on a fresh connection until the server is gone;
# one latency (ms) per line.
import socket, sys, time
port, path = int(sys.argv[1]), sys.argv[2]
with open(path, "w") as out:
    refused = 0
    while refused < 20:
        start = time.monotonic()
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            while s.recv(4096):
                pass
            s.close()
            out.write("%.3f\n" % ((time.monotonic() - start) * 1000))
            refused = 0
        except OSError:
            refused += 1
        time.sleep(max(0.0, 0.010 - (time.monotonic() - start)))
PY
stamp() { while IFS= read -r line; do printf '%s %s\n' "$(date +%s.%N)" "$line"; done; }
one() {  # one NAME FEDRT
  local name=$1 F=$2
  rm -f "$name".*
  "$F" serve --key-file keys/keys.txt --host 127.0.0.1 --port 0 --http 127.0.0.1:0 --codec "$codec" \
     --rounds "$rounds" --fraction "$fraction" --min-devices "$n" --deadline-ms 600000 --log-level warn \
     --checkpoint "$name.ckpt" --metrics "$name.jsonl" > >(stamp >"$name.out") 2>"$name.log" &
  local sp=$! port="" hport=""
  for _ in $(seq 300); do
    port=$(sed -n 's/.* listening on port \([0-9]*\)$/\1/p' "$name.out" 2>/dev/null)
    hport=$(sed -n 's/.* metrics on port \([0-9]*\)$/\1/p' "$name.out" 2>/dev/null)
    [[ -n $port && -n $hport ]] && break
    sleep 0.1
  done
  python3 probe.py "$hport" "$name.healthz" & local pp=$!
  echo "== $name: $F, $n devices, $rounds rounds, fraction $fraction, $codec (port $port, /healthz on $hport)"
  "$F" bench fleet --devices "$n" --rounds "$rounds" --codec "$codec" --server "127.0.0.1:$port" \
     --key-file keys/keys.txt --server-pid "$sp" --server-metrics "$name.jsonl" --timeout 900 --json >"$name.json"
  echo "bench exit $?"
  wait "$sp"; echo "serve exit $?"
  wait "$pp"
}
one old "$old"
one new "$new"
python3 - <<'PY'
import json
def pct(v, p):
    v = sorted(v)
    if not v: return float("nan")
    k = p * (len(v) - 1); lo = int(k); hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)
print("%-4s %8s %9s %9s %9s %10s %10s %11s %11s %9s %9s" % ("", "probes", "hz p50ms", "hz p99ms", "hz maxms",
      "round p50", "round p99", "period p50", "period p99", "gap p50", "accuracy"))
for name in ("old", "new"):
    hz = [float(x) for x in open(name + ".healthz")]
    j = json.load(open(name + ".json"))
    stamps = [float(l.split()[0]) for l in open(name + ".out") if " round " in l and "/" in l.split(" round ")[1][:8]]
    period = [b - a for a, b in zip(stamps, stamps[1:])]
    lines = [json.loads(l) for l in open(name + ".jsonl")]
    acc = [l.get("test_accuracy") for l in lines]
    # From one report to the next round's start: the period less that round's own time.
    gap = [p - l["seconds"] for p, l in zip(period, lines[1:])]
    print("%-4s %8d %9.2f %9.2f %9.2f %10.3f %10.3f %11.3f %11.3f %9.3f %9.4f" % (name, len(hz), pct(hz, .5),
          pct(hz, .99), max(hz) if hz else float("nan"), j.get("round_seconds_p50", float("nan")),
          j.get("round_seconds_p99", float("nan")), pct(period, .5), pct(period, .99), pct(gap, .5),
          acc[-1] if acc else -1))
PY
