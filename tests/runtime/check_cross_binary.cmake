# Checks a cross-built program for what a board will need of it (run by ctest,
# see tests/runtime/CMakeLists.txt):
#   - no RPATH or RUNPATH (a build-tree RUNPATH pointed into the build host's
#     sysroot, and its empty entry meant "the current directory");
#   - no glibc symbol version above MAX_GLIBC (the documented minimum glibc,
#     toolchains/README.md);
#   - with STATIC (FEDRT_STATIC_CLI): no shared library but glibc's, and the
#     program runs under QEMU in a root that holds the loader, libc and libm
#     alone, as on a board without libstdc++, OpenSSL or zlib installed.
# cmake -DBINARY=... -DREADELF=... -DOBJDUMP=... -DMAX_GLIBC=2.34 [-DSTATIC=ON
#       -DQEMU=qemu-arm -DLIBC_DIR=/usr/<triplet>/lib -DWORK_DIR=...] -P check_cross_binary.cmake
foreach(var BINARY READELF OBJDUMP MAX_GLIBC)
  if(NOT ${var})
    message(FATAL_ERROR "check_cross_binary: ${var} is not set")
  endif()
endforeach()

execute_process(COMMAND ${READELF} -d ${BINARY} OUTPUT_VARIABLE dynamic RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${READELF} -d ${BINARY} failed")
endif()
if(dynamic MATCHES "\\((RPATH|RUNPATH)\\)[^\n]*")
  message(FATAL_ERROR "${BINARY} carries a search path into the build host: ${CMAKE_MATCH_0}")
endif()

execute_process(COMMAND ${OBJDUMP} -T ${BINARY} OUTPUT_VARIABLE symbols RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${OBJDUMP} -T ${BINARY} failed")
endif()
string(REGEX MATCHALL "GLIBC_[0-9]+\\.[0-9]+(\\.[0-9]+)?[^\n]*" versioned "${symbols}")
set(highest 0)
set(highest_symbol "")
foreach(line IN LISTS versioned)
  string(REGEX MATCH "^GLIBC_([0-9.]+)" _ "${line}")
  set(version ${CMAKE_MATCH_1})
  if(version VERSION_GREATER highest)
    set(highest ${version})
    set(highest_symbol "${line}")
  endif()
endforeach()
message(STATUS "${BINARY}: highest glibc symbol version ${highest} (${highest_symbol})")
if(highest VERSION_GREATER MAX_GLIBC)
  message(FATAL_ERROR "${BINARY} needs glibc ${highest} (${highest_symbol}), above the documented ${MAX_GLIBC}: "
                      "update toolchains/README.md and this test's MAX_GLIBC, or find what pulled it in")
endif()

if(STATIC)
  string(REGEX MATCHALL "\\(NEEDED\\)[^[]*\\[[^]]*\\]" needed "${dynamic}")
  foreach(entry IN LISTS needed)
    string(REGEX MATCH "\\[(.*)\\]" _ "${entry}")
    if(NOT CMAKE_MATCH_1 MATCHES "^(libc\\.so\\.6|libm\\.so\\.6|ld-linux[-a-z0-9_.]*\\.so\\.[0-9])$")
      message(FATAL_ERROR "FEDRT_STATIC_CLI: ${BINARY} still needs the shared ${CMAKE_MATCH_1}")
    endif()
  endforeach()
  file(REMOVE_RECURSE ${WORK_DIR})
  file(MAKE_DIRECTORY ${WORK_DIR}/lib)
  file(GLOB loader ${LIBC_DIR}/ld-linux*.so.*)
  foreach(lib ${loader} ${LIBC_DIR}/libc.so.6 ${LIBC_DIR}/libm.so.6)
    get_filename_component(name ${lib} NAME)
    file(READ ${lib} _ LIMIT 1)  # fails loudly if missing
    file(COPY_FILE ${lib} ${WORK_DIR}/lib/${name})
  endforeach()
  execute_process(COMMAND ${QEMU} -L ${WORK_DIR} ${BINARY} info OUTPUT_VARIABLE out ERROR_VARIABLE err
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "kernel isa:")
    message(FATAL_ERROR "${BINARY} info under ${QEMU} with glibc alone failed (${rc}): ${out}${err}")
  endif()
  message(STATUS "runs with glibc alone:\n${out}")
endif()
