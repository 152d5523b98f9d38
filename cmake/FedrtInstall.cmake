# Install rules and the exported CMake package, so that an application does
#   find_package(fedrt REQUIRED)
#   target_link_libraries(app PRIVATE fedrt::runtime)   # or fedrt::c, the C API
include(CMakePackageConfigHelpers)

set(FEDRT_CMAKE_INSTALL_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/fedrt)

set(fedrt_install_targets fedrt_platform fedrt_codecs fedrt_transport fedrt_train fedrt_runtime fedrt_c)
install(TARGETS ${fedrt_install_targets}
        EXPORT fedrtTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET fedrt)
  install(TARGETS fedrt RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  if(TARGET fedrt_mpi_module)
    # `fedrt serve --mpi` loads it from here (runtime/src/star/mpi_tier.cc).
    install(TARGETS fedrt_mpi_module LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/fedrt)
  endif()
endif()

foreach(component platforms codecs transport runtime)
  if(EXISTS ${PROJECT_SOURCE_DIR}/${component}/include)
    install(DIRECTORY ${PROJECT_SOURCE_DIR}/${component}/include/
            DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
            FILES_MATCHING PATTERN "*.h")
  endif()
endforeach()
install(FILES ${PROJECT_BINARY_DIR}/generated/include/fedrt/platform/config.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/fedrt/platform)

install(EXPORT fedrtTargets NAMESPACE fedrt:: DESTINATION ${FEDRT_CMAKE_INSTALL_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/fedrtConfig.cmake.in
  ${PROJECT_BINARY_DIR}/fedrtConfig.cmake
  INSTALL_DESTINATION ${FEDRT_CMAKE_INSTALL_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/fedrtConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/fedrtConfig.cmake ${PROJECT_BINARY_DIR}/fedrtConfigVersion.cmake
        DESTINATION ${FEDRT_CMAKE_INSTALL_DIR})

# Deployment files for users of the tool: the license where Debian keeps it,
# the example systemd units (examples/systemd/README.md).
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR} RENAME copyright)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/systemd/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples/systemd)

# A Debian package of everything installed above (the tool, the libraries,
# the headers and the CMake package): `cpack -G DEB` in a build directory
# (build/release) writes fedrt_<version>_<arch>.deb. dpkg-shlibdeps fills in
# the shared libraries the tool needs (OpenBLAS, OpenSSL, zlib, zstd).
set(CPACK_PACKAGE_NAME fedrt)
set(CPACK_PACKAGE_VENDOR "fedrt")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Federated training on edge devices: the fedrt tool, libraries and headers")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
# The repository names no other contact; the address takes no mail (GitHub's
# noreply domain), issues go to the project's tracker.
set(CPACK_PACKAGE_CONTACT "fedrt developers <fedrt@users.noreply.github.com>")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${CPACK_PACKAGE_CONTACT}")
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
if(NOT CMAKE_CROSSCOMPILING)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
endif()
include(CPack)
