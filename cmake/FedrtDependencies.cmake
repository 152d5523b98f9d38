# Third-party dependencies, all from Debian packages (see .ci/install-deps and,
# for cross builds, toolchains/make-sysroot). Nothing is downloaded here.

# What the embeddable core (platform, codecs, training core, the transport's
# frames and join, the protocol engines, the C API) needs is FlatBuffers'
# header-only runtime and nothing else. These options add what a Linux host
# uses; each is on by default there, and firmware turns them off.
option(FEDRT_WITH_ASIO "TCP, TLS and loopback connections on Asio, the Linux hosts of the roles (RunDevice, RunAggregator, the TCP peer group) and the fedrt tool; needs threads" ON)
option(FEDRT_WITH_OPENSSL "libcrypto for the join's HMAC-SHA256 and nonces (transport::SystemCrypto); off: the application supplies a transport::Crypto" ON)
option(FEDRT_WITH_ZLIB "zlib for gzip-compressed IDX data sets (plain IDX files are read without it)" ON)
option(FEDRT_WITH_THREADS "The core's shared objects lock (std::mutex, 64-bit atomics: the frame pool, ManualClock) so threaded bindings may share them; off for a single-threaded target (Cortex-M)" ON)

if(FEDRT_WITH_ASIO AND NOT FEDRT_WITH_THREADS)
  message(FATAL_ERROR "FEDRT_WITH_ASIO needs FEDRT_WITH_THREADS (its connections run on an event loop thread)")
endif()
option(FEDRT_STATIC_CLI "Link the fedrt tool with static libstdc++ and libgcc and the static archives of OpenSSL, zlib and OpenBLAS, so that a board needs glibc alone (toolchains/README.md)" OFF)
if(FEDRT_STATIC_CLI)
  # Debian's -dev packages ship the .a next to the .so; prefer it. A missing
  # archive is a configure error below (find_package/find_library fail), not
  # a silently dynamic build.
  set(OPENSSL_USE_STATIC_LIBS TRUE)
  set(ZLIB_USE_STATIC_LIBS ON)
  set(fedrt_openblas_names libopenblas.a)
else()
  set(fedrt_openblas_names openblas)
endif()

if(FEDRT_WITH_ASIO OR FEDRT_STATIC_CLI)
  find_package(Threads REQUIRED)
endif()
# zlib: gzip-compressed data sets (fedrt::train).
if(FEDRT_WITH_ZLIB)
  find_package(ZLIB REQUIRED)
endif()

# OpenBLAS: Debian ships cblas.h under the multiarch include directory and the
# library through update-alternatives; look for both by name.
set(FEDRT_HAVE_OPENBLAS OFF)
if(FEDRT_WITH_OPENBLAS)
  find_path(FEDRT_CBLAS_INCLUDE_DIR cblas.h
            PATH_SUFFIXES openblas openblas-pthread ${CMAKE_LIBRARY_ARCHITECTURE}
                          ${CMAKE_LIBRARY_ARCHITECTURE}/openblas-pthread)
  find_library(FEDRT_OPENBLAS_LIBRARY NAMES ${fedrt_openblas_names}
               PATH_SUFFIXES openblas-pthread ${CMAKE_LIBRARY_ARCHITECTURE}/openblas-pthread)
  if(NOT FEDRT_CBLAS_INCLUDE_DIR OR NOT FEDRT_OPENBLAS_LIBRARY)
    message(FATAL_ERROR
      "FEDRT_WITH_OPENBLAS is ON but OpenBLAS was not found "
      "(include: ${FEDRT_CBLAS_INCLUDE_DIR}, library: ${FEDRT_OPENBLAS_LIBRARY}). "
      "Install libopenblas-dev (.ci/install-deps), or for a cross build run "
      "toolchains/make-sysroot, or configure with -DFEDRT_WITH_OPENBLAS=OFF "
      "to use the built-in GEMM.")
  endif()
  set(FEDRT_HAVE_OPENBLAS ON)
endif()

if(FEDRT_WITH_ASIO)
  find_path(FEDRT_ASIO_INCLUDE_DIR asio.hpp)
  if(NOT FEDRT_ASIO_INCLUDE_DIR)
    message(FATAL_ERROR "FEDRT_WITH_ASIO is ON but standalone Asio was not found (Debian: libasio-dev), "
                        "or configure the core alone with -DFEDRT_WITH_ASIO=OFF")
  endif()
endif()
find_path(FEDRT_CLI11_INCLUDE_DIR CLI/CLI.hpp)
find_package(doctest CONFIG QUIET)

# Transport: FlatBuffers (headers from the target, flatc from the host: the
# cross toolchains search programs on the host only), standalone Asio, and
# libcrypto for HMAC-SHA256 and random nonces.
if(CMAKE_SYSTEM_NAME STREQUAL "Generic")
  # Bare metal: the toolchain has no system include directory of the host,
  # and adding the host's /usr/include to a newlib build would mix two C
  # libraries. FlatBuffers' runtime is header-only and target-neutral, so
  # its headers alone are linked into the build tree and searched there.
  find_path(FEDRT_HOST_FLATBUFFERS_DIR flatbuffers/flatbuffers.h
            PATHS /usr/include /usr/local/include NO_DEFAULT_PATH NO_CMAKE_FIND_ROOT_PATH)
  if(FEDRT_HOST_FLATBUFFERS_DIR)
    file(MAKE_DIRECTORY ${PROJECT_BINARY_DIR}/host-headers)
    file(CREATE_LINK ${FEDRT_HOST_FLATBUFFERS_DIR}/flatbuffers ${PROJECT_BINARY_DIR}/host-headers/flatbuffers SYMBOLIC)
    set(FEDRT_FLATBUFFERS_INCLUDE_DIR ${PROJECT_BINARY_DIR}/host-headers CACHE PATH "FlatBuffers' headers" FORCE)
  endif()
endif()
find_path(FEDRT_FLATBUFFERS_INCLUDE_DIR flatbuffers/flatbuffers.h)
find_program(FEDRT_FLATC flatc)
if(FEDRT_WITH_OPENSSL)
  find_package(OpenSSL COMPONENTS Crypto)
  if(NOT OpenSSL_FOUND OR NOT TARGET OpenSSL::Crypto)
    message(FATAL_ERROR "FEDRT_WITH_OPENSSL is ON but libcrypto was not found (Debian: libssl-dev; for cross "
                        "builds toolchains/make-sysroot puts it in the sysroot), or configure with "
                        "-DFEDRT_WITH_OPENSSL=OFF and give the engines a transport::Crypto of your own")
  endif()
endif()
# Debian keeps the architecture-specific opensslconf.h under the multiarch
# include directory, which a cross compiler does not search in the sysroot.
find_path(FEDRT_OPENSSLCONF_INCLUDE_DIR openssl/opensslconf.h PATH_SUFFIXES ${CMAKE_LIBRARY_ARCHITECTURE})

# TLS for the TCP stream (asio::ssl on libssl): on by default when libssl is
# there. A build without it (firmware) still has the plain transport; asking
# for TLS there is a configure error rather than a silent plain build.
if(TARGET OpenSSL::SSL AND FEDRT_WITH_ASIO AND FEDRT_WITH_OPENSSL)
  set(fedrt_tls_default ON)
else()
  set(fedrt_tls_default OFF)
endif()
option(FEDRT_WITH_TLS "Optional TLS for TCP connections (needs Asio and libssl: Debian libssl-dev)" ${fedrt_tls_default})
if(FEDRT_WITH_TLS AND NOT (FEDRT_WITH_ASIO AND FEDRT_WITH_OPENSSL))
  message(FATAL_ERROR "FEDRT_WITH_TLS needs FEDRT_WITH_ASIO and FEDRT_WITH_OPENSSL (TLS runs on Asio TCP connections)")
endif()
if(FEDRT_WITH_TLS AND NOT TARGET OpenSSL::SSL)
  message(FATAL_ERROR "FEDRT_WITH_TLS is ON but libssl was not found (Debian: libssl-dev; for cross builds "
                      "toolchains/make-sysroot puts it in the sysroot), or configure with -DFEDRT_WITH_TLS=OFF")
endif()
if(FEDRT_WITH_TLS)
  set(FEDRT_CONFIG_OPENSSL_COMPONENTS "Crypto SSL")
else()
  set(FEDRT_CONFIG_OPENSSL_COMPONENTS "Crypto")
endif()
# The Linux hosts (RunDevice, RunAggregator, the TCP peer group) and the tool
# need Asio for their connections and libcrypto for the join.
if(FEDRT_WITH_ASIO AND FEDRT_WITH_OPENSSL)
  set(FEDRT_HAVE_HOSTS ON)
else()
  set(FEDRT_HAVE_HOSTS OFF)
endif()
# zstd: the yardstick beside rANS in `fedrt bench codecs` (the tool only; the
# codecs never link it). On by default where the tool is built and libzstd
# is found (Debian: libzstd-dev); off in the core and in cross builds whose
# sysroot lacks it. Asking for it where it is missing is a configure error.
find_package(zstd CONFIG QUIET)
if(FEDRT_HAVE_HOSTS AND FEDRT_BUILD_CLI AND TARGET zstd::libzstd_shared)
  set(fedrt_zstd_default ON)
else()
  set(fedrt_zstd_default OFF)
endif()
option(FEDRT_WITH_ZSTD "zstd levels 1 and 3 beside rANS in `fedrt bench codecs` (Debian: libzstd-dev)" ${fedrt_zstd_default})
if(FEDRT_WITH_ZSTD AND NOT TARGET zstd::libzstd_shared)
  message(FATAL_ERROR "FEDRT_WITH_ZSTD is ON but libzstd was not found (Debian: libzstd-dev; .ci/install-deps "
                      "installs it), or configure with -DFEDRT_WITH_ZSTD=OFF")
endif()

# The static archives, checked once more: a cache filled by an earlier dynamic
# configure would otherwise keep the shared libraries.
if(FEDRT_STATIC_CLI)
  foreach(lib IN LISTS ZLIB_LIBRARIES OPENSSL_CRYPTO_LIBRARY OPENSSL_SSL_LIBRARY FEDRT_OPENBLAS_LIBRARY)
    if(lib AND NOT lib MATCHES "\\.a$")
      message(FATAL_ERROR "FEDRT_STATIC_CLI is ON but ${lib} is not a static archive: install the -dev package "
                          "that ships the .a (for cross builds toolchains/make-sysroot), or configure a fresh "
                          "build directory (the cache holds the shared library)")
    endif()
  endforeach()
endif()
foreach(flag ASIO OPENSSL ZLIB TLS THREADS)
  if(FEDRT_WITH_${flag})
    set(FEDRT_HAVE_${flag}_01 1)
  else()
    set(FEDRT_HAVE_${flag}_01 0)
  endif()
endforeach()
