# Cross-compiling for 32-bit ARM Linux boards (ARMv7-A, hard float) with Debian's
# g++-arm-linux-gnueabihf.
#
# The baseline is Debian armhf's own: ARMv7-A with VFPv3-D16 and no NEON,
# because not every ARMv7 core has NEON. The NEON kernels are compiled with
# -mfpu=neon in their own object library (see cmake/FedrtKernels.cmake) and are
# chosen at run time only when getauxval(AT_HWCAP) reports NEON.
#
# This build uses fedrt's built-in GEMM (no OpenBLAS), so that configuration is
# exercised too. ctest runs the cross-built tests under qemu-arm.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR armv7l)
set(FEDRT_TARGET_TRIPLET arm-linux-gnueabihf)

set(CMAKE_C_COMPILER arm-linux-gnueabihf-gcc)
set(CMAKE_CXX_COMPILER arm-linux-gnueabihf-g++)
set(CMAKE_C_FLAGS_INIT "-march=armv7-a -mfpu=vfpv3-d16 -mfloat-abi=hard")
set(CMAKE_CXX_FLAGS_INIT "-march=armv7-a -mfpu=vfpv3-d16 -mfloat-abi=hard")

include("${CMAKE_CURRENT_LIST_DIR}/linux-cross-common.cmake")
# qemu-arm emulates a Cortex-A15 class CPU by default, which has NEON.
# The sysroot's libraries also reach the guest's loader through LD_LIBRARY_PATH:
# the build tree's RUNPATH covers direct dependencies only, not what they pull
# in themselves (libopenblas needs libgfortran, libssl needs libcrypto).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-arm -L /usr/${FEDRT_TARGET_TRIPLET}
    -E LD_LIBRARY_PATH=${FEDRT_SYSROOT}/lib/${FEDRT_TARGET_TRIPLET}:${FEDRT_SYSROOT}/usr/lib/${FEDRT_TARGET_TRIPLET})
