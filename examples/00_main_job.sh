#!/usr/bin/env bash
# The main job: a federated training run on this machine.
#
# Usage:   bash examples/00_main_job.sh
#          (on a fresh Debian 12 machine; installs what it needs with apt-get,
#          as root or through sudo, then builds the release preset)
#
# Expected output: the build, then `fedrt info` (CPU, kernel ISA, GEMM), then
# `fedrt sim`: one aggregator and 8 device processes, each device on a link of
# 1 Mbit/s up and down (as root: its own network namespace shaped with tc;
# otherwise the user-space shaper), train LeNet-300-100 on Fashion-MNIST until
# the test accuracy reaches 85%, once with fp32 updates and models and once with
# ndqsg updates and dqsg:s=4 model deltas (per tensor), one line per round:
#   [fp32] round 4/10  updates 8/8  test acc 85.xx%  ...  18.8 s (down 8.9, compute 0.8, up 8.9) ...
#   [ndqsg:... (down dqsg:s=4)] round 4/10  updates 8/8  test acc 85.xx%  ...  1.6 s (down 0.5, ...) ...
# then a table (final accuracy, MB uploaded, ratio against fp32, near-wraps)
# and one with the time to 85% and the speed-up against fp32 (x5.8 in our run:
# fp32 75.1 s, ndqsg 12.9 s; 89 s in all), and
# sim-out/metrics.jsonl, sim-out/plot.svg (accuracy against rounds, megabytes
# and wall time). About two minutes of training on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

.ci/install-deps
cmake --preset release >/dev/null
cmake --build --preset release
fedrt=build/release/runtime/fedrt

"$fedrt" info
"$fedrt" sim --out sim-out --link 1mbit --target-accuracy 0.85
