#!/usr/bin/env bash
# Writes the golden payloads of tests/codecs/data/aarch64_golden/ with the
# AArch64 build of `fedrt codec encode|decode`, run under qemu-aarch64, or
# with a native build's scalar reference kernels (FEDRT_ISA=scalar) when the
# build named is not a cross build: every ISA writes the same bytes, which
# codecs_aarch64_golden_test checks on each build.
# Needs `cmake --preset aarch64 && cmake --build --preset aarch64` first.
# Usage (from the repository root): bash tests/codecs/write_aarch64_goldens.sh [build/aarch64]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build/aarch64}
data=tests/codecs/data/aarch64_golden
fedrt=$build/runtime/fedrt
[[ -x $fedrt ]] || { echo "no $fedrt: build the aarch64 preset first" >&2; exit 1; }
sysroot=$(sed -n 's/^FEDRT_SYSROOT:PATH=//p' "$build/CMakeCache.txt")
if [[ -n $sysroot ]]; then
  # The same emulator command as the toolchain's CMAKE_CROSSCOMPILING_EMULATOR.
  emulator=(qemu-aarch64 -L /usr/aarch64-linux-gnu
            -E "LD_LIBRARY_PATH=$sysroot/lib/aarch64-linux-gnu:$sysroot/usr/lib/aarch64-linux-gnu")
else
  emulator=(env FEDRT_ISA=scalar)  # a native build: its scalar reference
fi
echo "running: ${emulator[*]} $fedrt"

# Inputs: integer arithmetic only (an LCG), exact float32 values: a spread of
# magnitudes up to 8, zeros and subnormals. Side information (small input
# only; the large one is for topk's one-pass path): 0.97 x, rounded to float32.
python3 - "$data" <<'PY'
import struct, sys
out = sys.argv[1]
def write(name, d, side):
    state = 98765
    xs = []
    for i in range(d):
        state = (state * 1664525 + 1013904223) & 0xffffffff
        mantissa = (state >> 8) - (1 << 23)            # [-2^23, 2^23)
        x = mantissa * 2.0 ** -23                      # exact in float32
        if i % 13 == 0: x *= 8.0
        if i % 29 == 0: x = 0.0
        if i % 31 == 0: x = mantissa * 2.0 ** -149     # subnormal, exact
        xs.append(x)
    with open(f"{out}/{name}.f32", "wb") as f:
        f.write(struct.pack(f"<{d}f", *xs))
    if side:
        with open(f"{out}/side_{name}.f32", "wb") as f:
            f.write(struct.pack(f"<{d}f", *[x * 0.97 for x in xs]))
write("small", 4099, True)
write("large", 65539, False)
PY

IFS='|' read -r _ seed round sender tensor < <(grep '^context|' "$data/manifest.txt")
grep -v -e '^#' -e '^context|' -e '^$' "$data/manifest.txt" | while IFS='|' read -r name spec input side; do
  side_args=()
  [[ $side == yes ]] && side_args=(--side-info "$data/side_$input.f32")
  "${emulator[@]}" "$fedrt" codec encode --codec "$spec" --seed "$seed" --round "$round" --sender "$sender" \
    --tensor "$tensor" "$data/$input.f32" "$data/$name.payload"
  "${emulator[@]}" "$fedrt" codec decode --seed "$seed" "${side_args[@]}" "$data/$name.payload" "$data/$name.decoded"
done
