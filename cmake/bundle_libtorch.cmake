# SPDX-License-Identifier: GPL-3.0-or-later
# Install-time half of Packaging.cmake. With MANTISSA_BUNDLE_COPY: copies every shared library
# the built executables load from LibTorch's pip install (torch/lib, and nvidia/*/lib for CUDA
# wheels) into lib/mantissa. Either way: once the executables and libtorch are both installed,
# their RPATH keeps only $ORIGIN/../lib/mantissa, so the install does not reach back into the
# build machine's .venv.
set(root "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}")
set(libdir "${root}/${MANTISSA_PRIVATE_LIBDIR}")

if(MANTISSA_BUNDLE_COPY)
  file(GET_RUNTIME_DEPENDENCIES
       EXECUTABLES ${MANTISSA_BUILT_EXECUTABLES}
       RESOLVED_DEPENDENCIES_VAR resolved
       DIRECTORIES "${MANTISSA_TORCH_LIBDIR}")
  # site-packages: the parent of torch/, where the nvidia-* wheels live too.
  file(REAL_PATH "${MANTISSA_TORCH_LIBDIR}/../.." site_packages)
  foreach(lib IN LISTS resolved)
    file(REAL_PATH "${lib}" real)
    string(FIND "${real}" "${site_packages}/" at)
    if(at EQUAL 0)
      message(STATUS "Bundling: ${lib}")
      file(INSTALL "${lib}" DESTINATION "${libdir}" FOLLOW_SYMLINK_CHAIN
           PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
    endif()
  endforeach()
endif()

if(EXISTS "${libdir}/libtorch.so")
  foreach(exe IN LISTS MANTISSA_INSTALLED_EXECUTABLES)
    if(EXISTS "${root}/${exe}")
      file(RPATH_SET FILE "${root}/${exe}" NEW_RPATH "\$ORIGIN/../${MANTISSA_PRIVATE_LIBDIR}")
    endif()
  endforeach()
endif()
