#!/usr/bin/env bash
# `mpirun -np K fedrt serve --mpi` against one `fedrt serve`: 8 devices (all
# pointed at rank 0 first, so the others are redirected to their shard), 5
# rounds; the saved global models must agree to 1e-6 relative (L2), with
# EXACT=1 bit for bit (robust rules: rank 0 combines every rank's updates as
# one aggregator does). Further arguments go to both serves (DP with a fixed
# noise seed: rank 0 alone adds the noise, so the tier's model is the single
# aggregator's); with --clip-update-norm both must report the same clipped
# counts, some of them not zero.
# Usage: [EXACT=1] mpi_serve_test.sh FEDRT TINY_IDX_DIR CODEC RANKS [SERVE-FLAGS...]
set -euo pipefail
fedrt=$1 data=$2 codec=$3 ranks=$4
extra=("${@:5}")
work=$(mktemp -d)
echo "work: $work"
trap 'kill $(jobs -p) 2>/dev/null || true; [[ -n ${KEEP:-} ]] || rm -rf "$work"' EXIT
"$fedrt" keygen --devices 8 --out "$work/keys" >/dev/null
common=(--key-file "$work/keys/keys.txt" --data "$data" --model mlp:784-32-10 --epochs 1 --lr 0.1
        --rounds 5 --min-devices 8 --codec "$codec" --deadline-ms 120000 --join-timeout-ms 60000 "${extra[@]}")
# The root user (CI containers) must say so to Open MPI.
mpi=(mpirun --oversubscribe -np "$ranks")
if [[ $(id -u) -eq 0 ]]; then
  mpi+=(--allow-run-as-root)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

run() {  # run NAME SERVE-PREFIX... : serve, then 8 devices at the port rank 0 prints
  local name=$1
  shift
  # The log exists before the poll below reads it: the background serve may
  # not have opened it yet (a loaded machine), and a failed sed ends the script.
  : >"$work/$name.log"
  "$@" "$fedrt" serve "${common[@]}" ${MPI_FLAG:-} --save-model "$work/$name.npz" >>"$work/$name.log" 2>&1 &
  local serve=$!
  local port=""
  for _ in $(seq 600); do
    port=$(sed -n 's/^\(rank 0 \)\{0,1\}listening on port \([0-9]*\)$/\2/p' "$work/$name.log" | head -1)
    [[ -n $port ]] && break
    kill -0 $serve 2>/dev/null || break
    sleep 0.1
  done
  [[ -n $port ]] || { echo "serve ($name) did not listen:"; cat "$work/$name.log"; exit 1; }
  local devices=()
  for i in $(seq 0 7); do
    "$fedrt" device --server "127.0.0.1:$port" --id "dev-$i" --key-file "$work/keys/keys/dev-$i.key" \
      --data "$data" --model mlp:784-32-10 --devices 8 --index "$i" --batch 16 --give-up-ms 120000 \
      >"$work/$name-dev-$i.log" 2>&1 &
    devices+=($!)
  done
  if ! wait $serve; then
    echo "serve ($name) failed:"; cat "$work/$name.log"; exit 1
  fi
  for d in "${devices[@]}"; do wait "$d" || true; done
}

run single env
MPI_FLAG=--mpi run tier "${mpi[@]}"
grep -q "redirected to its shard" "$work/tier.log" || { echo "no device was redirected:"; cat "$work/tier.log"; exit 1; }
if [[ " ${extra[*]} " == *" --clip-update-norm "* ]]; then
  clipped() { sed -n 's/.*  clipped \([0-9]*\).*/\1/p' "$work/$1.log" | tr '\n' ' '; }
  echo "clipped per round: single [$(clipped single)] tier [$(clipped tier)]"
  [[ -n $(clipped single) && $(clipped single) == "$(clipped tier)" ]] ||
    { echo "clipped counts differ or none"; exit 1; }
fi
/usr/bin/python3 - "$work/single.npz" "$work/tier.npz" "${EXACT:-0}" <<'PY'
import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
exact = sys.argv[3] == "1"
assert sorted(a.files) == sorted(b.files), (a.files, b.files)
keys = [k for k in sorted(a.files) if a[k].dtype.kind == 'f']  # the tensors, not the spec
assert keys, a.files
x = np.concatenate([a[k].ravel() for k in keys]).astype(np.float64)
y = np.concatenate([b[k].ravel() for k in keys]).astype(np.float64)
rel = np.linalg.norm(x - y) / np.linalg.norm(x)
print(f"relative L2 distance {rel:.3e} over {x.size} parameters")
assert rel < 1e-6, rel
if exact:
    for k in keys:
        assert a[k].tobytes() == b[k].tobytes(), f"{k}: not the same bits"
    print("the same bits")
PY
