# Shared by the Linux cross toolchain files: where to find the target's
# libraries. Expects FEDRT_TARGET_TRIPLET to be set by the including file.
if(NOT DEFINED FEDRT_SYSROOT)
  if(DEFINED ENV{FEDRT_SYSROOT})
    set(FEDRT_SYSROOT "$ENV{FEDRT_SYSROOT}")
  else()
    if(FEDRT_TARGET_TRIPLET STREQUAL "aarch64-linux-gnu")
      set(_fedrt_debian_arch arm64)
    else()
      set(_fedrt_debian_arch armhf)
    endif()
    if(DEFINED ENV{XDG_CACHE_HOME})
      set(FEDRT_SYSROOT "$ENV{XDG_CACHE_HOME}/fedrt/sysroot/${_fedrt_debian_arch}")
    else()
      set(FEDRT_SYSROOT "$ENV{HOME}/.cache/fedrt/sysroot/${_fedrt_debian_arch}")
    endif()
  endif()
endif()
set(FEDRT_SYSROOT "${FEDRT_SYSROOT}" CACHE PATH "Sysroot with the target's Debian libraries (toolchains/make-sysroot)")
# Try-compile projects re-read this file; pass the sysroot on to them.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES FEDRT_SYSROOT)

# The cross compiler's own libc lives in /usr/<triplet>; the extra libraries in
# the sysroot. Programs (flatc, qemu) are always taken from the host.
set(CMAKE_FIND_ROOT_PATH "/usr/${FEDRT_TARGET_TRIPLET}" "${FEDRT_SYSROOT}")
set(CMAKE_LIBRARY_ARCHITECTURE ${FEDRT_TARGET_TRIPLET})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# The sysroot's libraries need others of their own (libopenblas: libgfortran,
# libssl: libcrypto); the linker finds those through -rpath-link, which
# records nothing in the binaries (they carry no RUNPATH: see CMakeLists.txt).
set(_fedrt_rpath_link "-Wl,-rpath-link,${FEDRT_SYSROOT}/usr/lib/${FEDRT_TARGET_TRIPLET}:${FEDRT_SYSROOT}/lib/${FEDRT_TARGET_TRIPLET}")
set(CMAKE_EXE_LINKER_FLAGS_INIT "${_fedrt_rpath_link}")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "${_fedrt_rpath_link}")
