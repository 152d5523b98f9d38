# Compiler settings shared by fedrt's own targets. Nothing here touches global
# flags: targets opt in by linking fedrt::internal_flags (build tree only, never
# exported) through fedrt_target_defaults().

add_library(fedrt_internal_flags INTERFACE)
add_library(fedrt::internal_flags ALIAS fedrt_internal_flags)

target_compile_options(fedrt_internal_flags INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
  $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor> -Wcast-align -Wnull-dereference
  -Wformat=2 -Wimplicit-fallthrough
  # Bit-identical results across ISAs: never fuse a*b+c into an FMA behind our
  # back (GCC does by default on AArch64): the payload bytes are part of the format.
  -ffp-contract=off)
if(CMAKE_SYSTEM_NAME STREQUAL "Generic" AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(arm|cortex)")
  # Bare-metal ARM: GCC notes (-Wpsabi) that some std::map and std::vector
  # arguments are passed differently than before GCC 7.1, an ABI remark
  # about code built entirely with this compiler, nothing to fix.
  target_compile_options(fedrt_internal_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Wno-psabi>)
endif()
if(CMAKE_INTERPROCEDURAL_OPTIMIZATION AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # Link-time optimization (the cortex-m4 preset: about 18 KiB less flash).
  # Fat objects carry machine code beside the LTO bytecode, so an installed
  # static library links into a firmware project built with or without -flto.
  target_compile_options(fedrt_internal_flags INTERFACE -ffat-lto-objects)
  if(CMAKE_SYSTEM_NAME STREQUAL "Generic")
    # A firmware image is small: optimized as one unit rather than in
    # parallel partitions it comes out about 0.5 KiB smaller.
    target_link_options(fedrt_internal_flags INTERFACE -flto-partition=one)
  endif()
endif()
if(FEDRT_WARNINGS_AS_ERRORS)
  target_compile_options(fedrt_internal_flags INTERFACE -Werror)
endif()
if(FEDRT_SANITIZE)
  # vptr checking needs RTTI, which the embeddable core is built without.
  target_compile_options(fedrt_internal_flags INTERFACE
    -fsanitize=address,undefined -fno-sanitize=vptr -fno-sanitize-recover=all -fno-omit-frame-pointer)
  target_link_options(fedrt_internal_flags INTERFACE -fsanitize=address,undefined -fno-sanitize=vptr)
endif()

if(FEDRT_BUILD_FUZZERS)
  # The fuzz build instruments every fedrt library, not only the harnesses:
  # libFuzzer's coverage feedback (fuzzer-no-link: the edge counters and
  # comparison hooks, without libFuzzer's main) reaches into the decoders, and
  # ASan/UBSan see what happens there. A UBSan report stops the run, so the
  # fuzzer counts it as a crash.
  target_compile_options(fedrt_internal_flags INTERFACE
    -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize=vptr -fno-sanitize-recover=all
    -fno-omit-frame-pointer)
  target_link_options(fedrt_internal_flags INTERFACE -fsanitize=address,undefined -fno-sanitize=vptr)
endif()

# The embeddable core (platform, codecs, training) builds the way firmware
# builds it: no exceptions, no RTTI.
add_library(fedrt_embedded_flags INTERFACE)
target_compile_options(fedrt_embedded_flags INTERFACE -fno-exceptions -fno-rtti)

# fedrt_target_defaults(<target> [EMBEDDED])
function(fedrt_target_defaults target)
  cmake_parse_arguments(ARG "EMBEDDED" "" "" ${ARGN})
  target_link_libraries(${target} PRIVATE $<BUILD_INTERFACE:fedrt_internal_flags>)
  if(ARG_EMBEDDED)
    target_link_libraries(${target} PRIVATE $<BUILD_INTERFACE:fedrt_embedded_flags>)
  endif()
endfunction()
