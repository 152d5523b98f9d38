#!/usr/bin/env python3
"""The README's plain-Makefile recipe, proven: installs this bare-metal build
(`cmake --install` into a fresh prefix), builds examples/firmware with its
Makefile against the installed static libraries and headers alone, and runs
the image under QEMU until the firmware has built its model and its device
client through the C API (its first line, "firmware: fw-0, 256 examples,
model 50920 bytes of parameters, ..."). No aggregator listens, so the run
stops there: QEMU is ended once the line is read (a firmware that exits or
prints anything else first fails the test).

Usage: makefile_test.py CMAKE BUILD_DIR SOURCE_DIR DATA_DIR WORK_DIR
"""
import os
import shutil
import subprocess
import sys

EXPECTED = b"firmware: fw-0, 256 examples, model 50920 bytes of parameters"


def main():
    cmake, build, source, data, work = sys.argv[1:6]
    shutil.rmtree(work, ignore_errors=True)
    prefix = os.path.join(work, "prefix")
    out = os.path.join(work, "out")
    subprocess.run([cmake, "--install", build, "--prefix", prefix], check=True, stdout=subprocess.DEVNULL)
    for library in ("c", "runtime", "train", "codecs", "transport", "platform"):
        path = os.path.join(prefix, "lib", f"libfedrt_{library}.a")
        if not os.path.exists(path):
            sys.exit(f"the install has no {path}")
    if not os.path.exists(os.path.join(prefix, "include", "fedrt", "fedrt.h")):
        sys.exit("the install has no include/fedrt/fedrt.h")
    # Only the prefix: no include or library path of the source or build tree.
    subprocess.run(["make", "-C", os.path.join(source, "examples", "firmware"), f"FEDRT_PREFIX={prefix}",
                    f"OUT={out}", f"DATA_DIR={data}"], check=True)
    image = os.path.join(out, "fedrt_firmware.elf")
    qemu = subprocess.Popen(["qemu-system-arm", "-M", "mps2-an386", "-nographic", "-monitor", "none", "-serial",
                             "null", "-semihosting-config", "enable=on,target=native", "-kernel", image],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        first = qemu.stdout.readline().rstrip()
        while first.startswith(b"[fedrt"):  # the engine's log lines
            first = qemu.stdout.readline().rstrip()
    finally:
        qemu.kill()
        qemu.wait()
    print(f"the Makefile-built firmware says: {first.decode(errors='replace')}")
    if not first.startswith(EXPECTED):
        sys.exit(f"expected {EXPECTED.decode()!r}")
    print("makefile test: passed")


if __name__ == "__main__":
    main()
