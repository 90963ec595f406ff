# SPDX-License-Identifier: GPL-3.0-or-later
# `cmake --install` and `cpack -G DEB` (README "Install and package").
#
# Two install components:
#   Runtime   (default) the executables, the example projects, the desktop integration
#             (resources/CMakeLists.txt) and the copyright file.
#   LibTorch  (only on request, and in the package) LibTorch's shared libraries, copied from
#             the torch install the build linked against into lib/mantissa.
# The executables look in $ORIGIN/../lib/mantissa first, then in the LibTorch folder of the
# build, so a plain install runs on the build machine without LD_LIBRARY_PATH; where LibTorch
# is bundled, the absolute folder is dropped from the installed executables' RPATH.
set(MANTISSA_PRIVATE_LIBDIR lib/mantissa)
get_filename_component(MANTISSA_TORCH_LIBDIR "${TORCH_LIBRARY}" DIRECTORY)

set(MANTISSA_EXECUTABLES mantissa-train)
if(TARGET mantissa)
  list(APPEND MANTISSA_EXECUTABLES mantissa)
endif()
# The CUDA runtime our kernels link (a CUDA build): its folder, as the build found it.
set(MANTISSA_CUDA_RUNTIME_DIR)
if(TARGET mantissa_cuda_kernels)
  get_target_property(MANTISSA_CUDA_RUNTIME_DIR mantissa_cuda_kernels MANTISSA_RUNTIME_DIR)
  if(NOT MANTISSA_CUDA_RUNTIME_DIR)
    set(MANTISSA_CUDA_RUNTIME_DIR)
  endif()
endif()
# Built with their install RPATH too: for the in-place edit at install, CMake padded the build
# tree's RPATH with a trailing ':', an empty element that is the working directory, searched for
# Qt, SQLite and libcrypto before the system (a libsqlite3.so.0 in the folder a user ran
# mantissa-train from was loaded). The build tree finds LibTorch and the CUDA runtime the same way.
set(MANTISSA_RPATH "\$ORIGIN/../${MANTISSA_PRIVATE_LIBDIR}" "${MANTISSA_TORCH_LIBDIR}")
if(MANTISSA_CUDA_RUNTIME_DIR)
  list(APPEND MANTISSA_RPATH "${MANTISSA_CUDA_RUNTIME_DIR}")
endif()
set_target_properties(${MANTISSA_EXECUTABLES} PROPERTIES BUILD_WITH_INSTALL_RPATH ON INSTALL_RPATH "${MANTISSA_RPATH}")

install(TARGETS ${MANTISSA_EXECUTABLES} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT Runtime)
install(FILES ${PROJECT_SOURCE_DIR}/projects/default.json ${PROJECT_SOURCE_DIR}/projects/shakespeare-char.json
        DESTINATION ${CMAKE_INSTALL_DATADIR}/mantissa/projects COMPONENT Runtime)
install(FILES ${PROJECT_SOURCE_DIR}/resources/debian/copyright DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/mantissa
        COMPONENT Runtime)
# Debian wants the changelog compressed without a timestamp (gzip -n), so reproducible.
find_program(MANTISSA_GZIP gzip)
if(MANTISSA_GZIP)
  execute_process(COMMAND ${MANTISSA_GZIP} -9nc ${PROJECT_SOURCE_DIR}/resources/debian/changelog
                  OUTPUT_FILE ${PROJECT_BINARY_DIR}/changelog.gz)
  install(FILES ${PROJECT_BINARY_DIR}/changelog.gz DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/mantissa COMPONENT Runtime)
endif()

set(MANTISSA_INSTALLED_EXECUTABLES)
set(MANTISSA_BUILT_EXECUTABLES)
foreach(exe IN LISTS MANTISSA_EXECUTABLES)
  list(APPEND MANTISSA_INSTALLED_EXECUTABLES "${CMAKE_INSTALL_BINDIR}/${exe}")
  list(APPEND MANTISSA_BUILT_EXECUTABLES "$<TARGET_FILE:${exe}>")
endforeach()
set(MANTISSA_BUNDLE_VARIABLES
  "set(MANTISSA_TORCH_LIBDIR \"${MANTISSA_TORCH_LIBDIR}\")
   set(MANTISSA_PRIVATE_LIBDIR \"${MANTISSA_PRIVATE_LIBDIR}\")
   set(MANTISSA_INSTALLED_EXECUTABLES \"${MANTISSA_INSTALLED_EXECUTABLES}\")
   set(MANTISSA_BUILT_EXECUTABLES \"${MANTISSA_BUILT_EXECUTABLES}\")
   set(MANTISSA_STRIP \"${CMAKE_STRIP}\")")
# Either component may be installed first; each drops the absolute RPATH once both are there.
install(CODE "${MANTISSA_BUNDLE_VARIABLES}
              set(MANTISSA_BUNDLE_COPY OFF)" COMPONENT Runtime)
install(SCRIPT ${CMAKE_CURRENT_LIST_DIR}/bundle_libtorch.cmake COMPONENT Runtime)
install(CODE "${MANTISSA_BUNDLE_VARIABLES}
              set(MANTISSA_BUNDLE_COPY ON)" COMPONENT LibTorch EXCLUDE_FROM_ALL)
install(SCRIPT ${CMAKE_CURRENT_LIST_DIR}/bundle_libtorch.cmake COMPONENT LibTorch EXCLUDE_FROM_ALL)

# The Debian package: one .deb with both components, LibTorch bundled, the rest from Debian 12.
set(CPACK_PACKAGE_NAME mantissa)
set(CPACK_PACKAGE_VENDOR "The Mantissa authors")
set(CPACK_PACKAGE_CONTACT "Mantissa maintainers <mantissa@example.org>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "mixed-precision transformer training workbench")
set(CPACK_PACKAGE_DESCRIPTION "Mantissa trains GPT-style transformers with a precision recipe per layer
(FP32, TF32, BF16, FP16, FP8) and shows the numerics live. LibTorch is bundled.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# One package with both components; LibTorch is EXCLUDE_FROM_ALL, so it is named explicitly.
set(CPACK_INSTALL_CMAKE_PROJECTS "${PROJECT_BINARY_DIR};${PROJECT_NAME};Runtime;/"
                                 "${PROJECT_BINARY_DIR};${PROJECT_NAME};LibTorch;/")
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE https://github.com/mantissa/mantissa)
set(CPACK_DEBIAN_PACKAGE_DEPENDS
  "libc6 (>= 2.34), libstdc++6 (>= 12), libgcc-s1, libsqlite3-0 (>= 3.31)")
if(TARGET mantissa)
  string(APPEND CPACK_DEBIAN_PACKAGE_DEPENDS ", libqt6core6 (>= 6.4), libqt6gui6 (>= 6.4), libqt6widgets6 (>= 6.4),"
         " libqt6printsupport6 (>= 6.4), libqt6network6 (>= 6.4), qt6-qpa-plugins (>= 6.4),"
         " libqcustomplot2.1-qt6")
endif()
# mantissa-train's store server links cpp-httplib's shared library, whose Debian package is
# named after its major.minor version (libcpp-httplib0.11 on Debian 12).
if(MANTISSA_WITH_REMOTE AND CPPHTTPLIB_VERSION MATCHES "^([0-9]+)\\.([0-9]+)")
  string(APPEND CPACK_DEBIAN_PACKAGE_DEPENDS ", libcpp-httplib${CMAKE_MATCH_1}.${CMAKE_MATCH_2}")
endif()
# mantissa-train links libcrypto itself where the store server prints its certificate's
# fingerprint (remote/CMakeLists.txt). Depends names the Debian package that owns the library
# (libssl3 on Debian 12, libssl3t64 on 13), asked of dpkg rather than guessed from its name.
if(MANTISSA_CRYPTO_LIBRARY)
  file(REAL_PATH "${MANTISSA_CRYPTO_LIBRARY}" crypto_file)
  # dpkg knows a file by the path its package installed: with or without /usr (merged /usr).
  string(REGEX REPLACE "^/usr/" "/" crypto_unmerged "${crypto_file}")
  foreach(candidate "${crypto_file}" "${crypto_unmerged}" "/usr${crypto_file}")
    execute_process(COMMAND dpkg -S "${candidate}" OUTPUT_VARIABLE crypto_owner ERROR_QUIET
                    OUTPUT_STRIP_TRAILING_WHITESPACE)
    string(REGEX MATCH "^[^:, ]+" crypto_package "${crypto_owner}")
    if(crypto_package)
      string(APPEND CPACK_DEBIAN_PACKAGE_DEPENDS ", ${crypto_package}")
      break()
    endif()
  endforeach()
endif()
include(CPack)
