# Cross-compiling for 64-bit ARM Linux boards (ARMv8-A, AArch64) with Debian's
# g++-aarch64-linux-gnu. NEON (Advanced SIMD) is part of the AArch64 baseline,
# so no SIMD flag is needed here.
#
# The target's Debian libraries (OpenBLAS, libcrypto, zlib) come from the
# sysroot that toolchains/make-sysroot builds; FEDRT_SYSROOT points elsewhere.
# ctest runs the cross-built tests under qemu-aarch64.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(FEDRT_TARGET_TRIPLET aarch64-linux-gnu)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

include("${CMAKE_CURRENT_LIST_DIR}/linux-cross-common.cmake")
# The sysroot's libraries also reach the guest's loader through LD_LIBRARY_PATH:
# the build tree's RUNPATH covers direct dependencies only, not what they pull
# in themselves (libopenblas needs libgfortran, libssl needs libcrypto).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/${FEDRT_TARGET_TRIPLET}
    -E LD_LIBRARY_PATH=${FEDRT_SYSROOT}/lib/${FEDRT_TARGET_TRIPLET}:${FEDRT_SYSROOT}/usr/lib/${FEDRT_TARGET_TRIPLET})
