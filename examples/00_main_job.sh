#!/usr/bin/env bash
# The main job: a federated training run on this machine.
#
# Usage:   bash examples/00_main_job.sh
#          (on a fresh Debian 12 machine; installs what it needs with apt-get,
#          as root or through sudo, then builds the release preset)
#
# Expected output: the build, then `fedrt info` (CPU, kernel ISA, GEMM).
# The federated simulation is added here by the star-topology work.
set -euo pipefail
cd "$(dirname "$0")/.."

.ci/install-deps
cmake --preset release >/dev/null
cmake --build --preset release
fedrt=build/release/runtime/fedrt

"$fedrt" info
