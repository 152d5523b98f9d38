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
