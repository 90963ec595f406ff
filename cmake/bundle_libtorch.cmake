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
       CONFLICTING_DEPENDENCIES_PREFIX conflict
       DIRECTORIES "${MANTISSA_TORCH_LIBDIR}")
  # site-packages: the parent of torch/, where the nvidia-* wheels live too.
  file(REAL_PATH "${MANTISSA_TORCH_LIBDIR}/../.." site_packages)
  # The wheel brings its own copies of some system libraries (libgomp.so.1); LibTorch's own
  # RUNPATH ($ORIGIN) makes it load those, so those are the ones to bundle.
  foreach(name IN LISTS conflict_FILENAMES)
    foreach(candidate IN LISTS conflict_${name})
      file(REAL_PATH "${candidate}" real)
      string(FIND "${real}" "${site_packages}/" at)
      if(at EQUAL 0)
        list(APPEND resolved "${candidate}")
      endif()
    endforeach()
  endforeach()
  foreach(lib IN LISTS resolved)
    file(REAL_PATH "${lib}" real)
    string(FIND "${real}" "${site_packages}/" at)
    if(at EQUAL 0)
      # file(INSTALL) adds DESTDIR itself.
      file(INSTALL "${lib}" DESTINATION "${CMAKE_INSTALL_PREFIX}/${MANTISSA_PRIVATE_LIBDIR}" FOLLOW_SYMLINK_CHAIN
           PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
      get_filename_component(name "${lib}" NAME)
      # The wheel's libraries keep their symbol tables; a package strips them (CPACK_STRIP_FILES).
      if(CMAKE_INSTALL_DO_STRIP AND MANTISSA_STRIP)
        execute_process(COMMAND "${MANTISSA_STRIP}" --strip-unneeded "${libdir}/${name}" COMMAND_ERROR_IS_FATAL ANY)
      endif()
    endif()
  endforeach()
  # The wheels' licence texts go with their libraries: PyTorch's BSD licence (and its third
  # parties') asks that its notice ship with binaries, as NVIDIA's (CUDA wheels) do.
  file(GLOB licence_dirs "${site_packages}/torch-*.dist-info/licenses")
  foreach(dir IN LISTS licence_dirs)
    file(INSTALL "${dir}/" DESTINATION "${CMAKE_INSTALL_PREFIX}/share/doc/mantissa/libtorch")
  endforeach()
  file(GLOB nvidia_licences "${site_packages}/nvidia_*.dist-info/License*" "${site_packages}/nvidia_*.dist-info/LICENSE*"
       "${site_packages}/nvidia_*.dist-info/licenses/*")
  foreach(licence IN LISTS nvidia_licences)
    get_filename_component(dist "${licence}" DIRECTORY)
    string(REGEX REPLACE ".*/(nvidia_[^/]*)\\.dist-info.*" "\\1" dist "${dist}")
    file(INSTALL "${licence}" DESTINATION "${CMAKE_INSTALL_PREFIX}/share/doc/mantissa/nvidia/${dist}")
  endforeach()
endif()

file(GLOB bundled "${libdir}/*.so*")
if(bundled)
  foreach(exe IN LISTS MANTISSA_INSTALLED_EXECUTABLES)
    if(EXISTS "${root}/${exe}")
      file(RPATH_SET FILE "${root}/${exe}" NEW_RPATH "\$ORIGIN/../${MANTISSA_PRIVATE_LIBDIR}")
    endif()
  endforeach()
endif()
