# ctest -P script: `cmake --install` of this build puts the tool in bin/ (and
# it runs from there), and `cpack -G DEB` makes a .deb whose file list
# (`dpkg-deb -c`) holds the tool, every library, the public headers, the
# CMake package and the example systemd units, with the shared libraries
# the tool needs as dependencies and a real Maintainer; and that `dpkg -i`
# installs it into a throwaway root (its own package database under WORK,
# never the machine's) from which the installed fedrt runs.
#   -DBUILD=<build dir> -DWORK=<dir> -DDPKG_DEB=dpkg-deb -DDPKG=dpkg (optional) -DCPACK=cpack
#   -DLIBDIR=<lib dir name>
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${WORK}/prefix
                RESULT_VARIABLE status OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "cmake --install failed: ${err}")
endif()
execute_process(COMMAND ${WORK}/prefix/bin/fedrt --version RESULT_VARIABLE status OUTPUT_VARIABLE version)
if(NOT status EQUAL 0 OR NOT version MATCHES "^fedrt [0-9]")
  message(FATAL_ERROR "the installed bin/fedrt does not run: ${status} ${version}")
endif()

execute_process(COMMAND ${CPACK} -G DEB --config ${BUILD}/CPackConfig.cmake -B ${WORK}/deb
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "cpack -G DEB failed:\n${out}")
endif()
file(GLOB debs ${WORK}/deb/fedrt_*.deb)
list(LENGTH debs count)
if(NOT count EQUAL 1)
  message(FATAL_ERROR "expected one fedrt_*.deb in ${WORK}/deb, found: ${debs}")
endif()
execute_process(COMMAND ${DPKG_DEB} -c ${debs} RESULT_VARIABLE status OUTPUT_VARIABLE listing)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "dpkg-deb -c ${debs} failed")
endif()
foreach(path
    ./usr/bin/fedrt
    ./usr/${LIBDIR}/libfedrt_runtime.a ./usr/${LIBDIR}/libfedrt_c.a ./usr/${LIBDIR}/libfedrt_codecs.a
    ./usr/${LIBDIR}/libfedrt_transport.a ./usr/${LIBDIR}/libfedrt_train.a ./usr/${LIBDIR}/libfedrt_platform.a
    ./usr/${LIBDIR}/cmake/fedrt/fedrtConfig.cmake
    ./usr/include/fedrt/fedrt.h ./usr/include/fedrt/runtime/aggregator.h ./usr/include/fedrt/transport/http.h
    ./usr/include/fedrt/platform/config.h
    ./usr/share/doc/fedrt/copyright ./usr/share/doc/fedrt/examples/systemd/fedrt-aggregator.service)
  string(FIND "${listing}" " ${path}\n" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${debs} lacks ${path}; it holds:\n${listing}")
  endif()
endforeach()
execute_process(COMMAND ${DPKG_DEB} -f ${debs} Package Version Maintainer Depends OUTPUT_VARIABLE fields)
if(NOT fields MATCHES "Package: fedrt" OR NOT fields MATCHES "Depends: [^\n]*libc6" OR
   NOT fields MATCHES "Maintainer: fedrt developers <fedrt@users.noreply.github.com>")
  message(FATAL_ERROR "${debs}: unexpected control fields:\n${fields}")
endif()
message(STATUS "${debs}:\n${fields}")

if(DPKG)
  # --root makes dpkg use ROOT/var/lib/dpkg as its database and ROOT as the
  # installation directory; --force-depends because that database knows none
  # of the machine's packages (the libraries are there all the same).
  set(root ${WORK}/root)
  file(MAKE_DIRECTORY ${root}/var/lib/dpkg/info ${root}/var/lib/dpkg/updates)
  file(WRITE ${root}/var/lib/dpkg/status "")
  execute_process(COMMAND ${DPKG} --root=${root} --log=${WORK}/dpkg.log --force-not-root --force-depends
                          --force-script-chrootless -i ${debs}
                  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "dpkg -i into ${root} failed:\n${out}")
  endif()
  execute_process(COMMAND ${DPKG} --root=${root} --log=${WORK}/dpkg.log -s fedrt OUTPUT_VARIABLE state)
  if(NOT state MATCHES "Status: install ok installed")
    message(FATAL_ERROR "dpkg --root=${root} does not list fedrt as installed:\n${state}")
  endif()
  execute_process(COMMAND ${root}/usr/bin/fedrt --version RESULT_VARIABLE status OUTPUT_VARIABLE version
                  ERROR_VARIABLE version)
  if(NOT status EQUAL 0 OR NOT version MATCHES "^fedrt [0-9]")
    message(FATAL_ERROR "the fedrt the .deb installed does not run: ${status} ${version}")
  endif()
  message(STATUS "dpkg -i into ${root}: ${version}")
endif()
