# Cross-compiling for Cortex-M4F microcontrollers (bare metal, no operating
# system) with Debian's gcc-arm-none-eabi and newlib.
#
# Facts about the target: ARMv7E-M, Thumb-2, single-precision FPU
# (fpv4-sp-d16), hard-float calling convention, newlib for the C library. No NEON on Cortex-M: the NEON kernels are not
# compiled (cmake/FedrtKernels.cmake only enables them for ARM *Linux*).
#
# ctest runs the cross-built tests on QEMU's MPS2 AN386 board (a Cortex-M4
# with 4 MiB of code and 4 MiB of data memory): semihosting carries their
# output and their exit status to the host (platforms/boards/mps2-an386).
set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_SYSTEM_PROCESSOR cortex-m4)
set(FEDRT_TARGET_TRIPLET arm-none-eabi)

set(CMAKE_C_COMPILER arm-none-eabi-gcc)
set(CMAKE_CXX_COMPILER arm-none-eabi-g++)
set(CMAKE_ASM_COMPILER arm-none-eabi-gcc)
set(CMAKE_AR arm-none-eabi-ar)
set(CMAKE_RANLIB arm-none-eabi-ranlib)
set(CMAKE_SIZE arm-none-eabi-size)

set(_fedrt_cpu_flags "-mcpu=cortex-m4 -mthumb -mfpu=fpv4-sp-d16 -mfloat-abi=hard")
# Each function and object in its own section, so the linker's
# --gc-sections drops what the firmware does not reach.
set(CMAKE_C_FLAGS_INIT "${_fedrt_cpu_flags} -ffunction-sections -fdata-sections")
set(CMAKE_CXX_FLAGS_INIT "${_fedrt_cpu_flags} -ffunction-sections -fdata-sections")
set(CMAKE_ASM_FLAGS_INIT "${_fedrt_cpu_flags}")
# The full newlib, not newlib-nano (--specs=nano.specs): nano's printf knows
# neither %llu / %zu, which the core's log lines use, nor floating point
# unless linked with -u _printf_float, and the codecs write their canonical
# spec (k=0.05) into every payload header with snprintf("%g") -- under nano
# the logs come out garbled and a topk payload header reads "k=". Full newlib
# costs about 20 KiB of flash more (README, "Firmware").
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,--gc-sections")

# Without a board's startup code and linker script nothing links, so the
# compiler checks build a static library instead of a program.
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)

# Headers (FlatBuffers' runtime) are header-only and target-neutral: take
# them from the host; libraries only from the toolchain; programs (flatc,
# qemu) from the host.
set(CMAKE_FIND_ROOT_PATH /usr/lib/arm-none-eabi)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# The board the tests run on, and how: -kernel loads the ELF; semihosting
# (target=native) gives the program the host's stdout and its exit status.
set(FEDRT_BOARD "mps2-an386" CACHE STRING "Board support (platforms/boards/<name>) the programs link")
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-system-arm -M mps2-an386 -nographic -monitor none -serial null
    -semihosting-config enable=on,target=native -kernel)
