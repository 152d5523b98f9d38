# Per-ISA kernel object libraries.
#
# SIMD flags such as -mavx2 must only reach the files written for that ISA:
# if they leaked into ordinary code, the compiler could emit AVX2 instructions
# in paths that run before the CPU check, and the program would crash on an
# older CPU. So each kernel family puts its scalar files in the component
# library and its ISA files into an object library per ISA:
#
#   fedrt_add_isa_kernels(fedrt_codecs
#     AVX2 src/philox/philox_avx2.cc
#     NEON src/philox/philox_neon.cc)
#
# FEDRT_KERNEL_ISAS lists what this build compiles (scalar always). A target
# that calls the function gets FEDRT_HAVE_AVX2 / FEDRT_HAVE_NEON defined so its
# dispatch table knows which variants exist; which one runs is decided at run
# time by fedrt/platform/cpu.h.

set(FEDRT_KERNEL_ISAS scalar)
set(FEDRT_AVX2_FLAGS "")
set(FEDRT_AVX512_FLAGS "")
set(FEDRT_NEON_FLAGS "")
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  if(FEDRT_ENABLE_AVX2)
    list(APPEND FEDRT_KERNEL_ISAS avx2)
    set(FEDRT_AVX2_FLAGS -mavx2 -mfma -mf16c -msse4.2)
    # AVX-512 extends the AVX2 set: families without AVX-512 files run their
    # AVX2 kernels under it (see cpu.h).
    if(FEDRT_ENABLE_AVX512)
      list(APPEND FEDRT_KERNEL_ISAS avx512)
      set(FEDRT_AVX512_FLAGS ${FEDRT_AVX2_FLAGS} -mavx512f -mavx512bw -mavx512dq -mavx512vl)
    endif()
  endif()
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64)$")
  if(FEDRT_ENABLE_NEON)
    list(APPEND FEDRT_KERNEL_ISAS neon)   # part of the AArch64 baseline: no flag
  endif()
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^arm" AND NOT CMAKE_SYSTEM_NAME STREQUAL "Generic")
  # ARMv7-A Linux boards. Bare-metal ARM (CMAKE_SYSTEM_NAME Generic: Cortex-M,
  # toolchains/arm-none-eabi.cmake) has no NEON and stays scalar.
  if(FEDRT_ENABLE_NEON)
    list(APPEND FEDRT_KERNEL_ISAS neon)
    set(FEDRT_NEON_FLAGS -mfpu=neon)
  endif()
endif()

function(fedrt_add_isa_kernels target)
  cmake_parse_arguments(ARG "" "" "AVX2;AVX512;NEON" ${ARGN})
  foreach(isa IN ITEMS AVX2 AVX512 NEON)
    string(TOLOWER ${isa} lower)
    if(NOT ARG_${isa} OR NOT lower IN_LIST FEDRT_KERNEL_ISAS)
      continue()
    endif()
    set(objects ${target}_${lower})
    if(NOT TARGET ${objects})
      add_library(${objects} OBJECT)
      target_compile_options(${objects} PRIVATE ${FEDRT_${isa}_FLAGS})
      fedrt_target_defaults(${objects} EMBEDDED)
      # Same include paths and definitions as the library the objects join;
      # kernels may use the platform layer, nothing else.
      target_link_libraries(${objects} PRIVATE fedrt::platform)
      target_include_directories(${objects} PRIVATE
        $<TARGET_PROPERTY:${target},INCLUDE_DIRECTORIES>)
      target_compile_definitions(${objects} PRIVATE
        $<TARGET_PROPERTY:${target},COMPILE_DEFINITIONS>)
      set_target_properties(${objects} PROPERTIES POSITION_INDEPENDENT_CODE ON)
      target_sources(${target} PRIVATE $<TARGET_OBJECTS:${objects}>)
      target_compile_definitions(${target} PRIVATE FEDRT_HAVE_${isa}=1)
    endif()
    target_sources(${objects} PRIVATE ${ARG_${isa}})
  endforeach()
endfunction()
