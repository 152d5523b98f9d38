#!/usr/bin/env bash
# The main job: a federated training run on this machine.
#
# Usage:   bash examples/00_main_job.sh
#          (on a fresh Debian 12 machine; installs what it needs with apt-get,
#          as root or through sudo, then builds the release preset)
#
# Expected output: the build, then `fedrt info` (CPU, kernel ISA, GEMM), then
# `fedrt sim`: one aggregator and 8 device processes on 127.0.0.1 train
# LeNet-300-100 on Fashion-MNIST for 10 rounds, once with fp32 updates and once
# with ndqsg, one line per round:
#   [fp32] round 10/10  updates 8/8  test acc 8x.xx%  ...  up 8.532 MB  ...  x1.0 vs fp32
#   [ndqsg:...] round 10/10  updates 8/8  test acc 8x.xx%  ...  x2x.x vs fp32  wraps ...
# then a table (final accuracy, MB uploaded, ratio against fp32, near-wraps)
# and sim-out/metrics.jsonl, sim-out/plot.svg. A few minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

.ci/install-deps
cmake --preset release >/dev/null
cmake --build --preset release
fedrt=build/release/runtime/fedrt

"$fedrt" info
"$fedrt" sim --out sim-out
