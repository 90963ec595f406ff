# SPDX-License-Identifier: GPL-3.0-or-later
# PyPI's torch for Linux is a CUDA build. Its TorchConfig.cmake stops configuring where no
# CUDA toolkit is installed ("Your installed Caffe2 version uses CUDA but I cannot find the
# CUDA libraries"), yet its libraries need none: libtorch.so loads libtorch_cuda.so, and the
# nvidia-* wheels pip installed beside it bring the CUDA runtime. That is a fresh Debian
# machine, or a GPU server with the driver and no toolkit. There LibTorch is imported here as
# its CPU build would be: Mantissa trains on CPU or GPU through LibTorch's own kernels, without
# its own CUDA kernels and NCCL data parallelism, which need the toolkit's headers (CMake says
# so). Where a toolkit is found, or LibTorch is a CPU build, this does nothing.
#
# Sets MANTISSA_TORCH_WITHOUT_TOOLKIT, and what find_package(Torch) sets: Torch_FOUND, the
# `torch` target, TORCH_LIBRARY, TORCH_LIBRARIES, TORCH_INSTALL_PREFIX, TORCH_INCLUDE_DIRS.
set(MANTISSA_TORCH_WITHOUT_TOOLKIT OFF)
set(_mantissa_torch_config "")
if(Torch_DIR AND EXISTS "${Torch_DIR}/TorchConfig.cmake")
  set(_mantissa_torch_config "${Torch_DIR}/TorchConfig.cmake")
else()
  foreach(_prefix IN LISTS CMAKE_PREFIX_PATH)
    if(EXISTS "${_prefix}/Torch/TorchConfig.cmake")
      set(_mantissa_torch_config "${_prefix}/Torch/TorchConfig.cmake")
      break()
    endif()
  endforeach()
endif()
if(_mantissa_torch_config)
  get_filename_component(_mantissa_torch_root "${_mantissa_torch_config}" DIRECTORY)
  get_filename_component(_mantissa_torch_root "${_mantissa_torch_root}/../../.." ABSOLUTE) # .../site-packages/torch
  if(EXISTS "${_mantissa_torch_root}/lib/libtorch_cuda.so")
    find_package(CUDAToolkit QUIET)
    if(NOT CUDAToolkit_FOUND)
      set(MANTISSA_TORCH_WITHOUT_TOOLKIT ON)
    endif()
  endif()
endif()

if(MANTISSA_TORCH_WITHOUT_TOOLKIT)
  message(STATUS "Mantissa: LibTorch at ${_mantissa_torch_root} is a CUDA build and no CUDA toolkit was found: "
                 "imported without its CUDA headers (it trains on a GPU through LibTorch's kernels; Mantissa's own "
                 "CUDA kernels and NCCL data parallelism need the toolkit)")
  set(TORCH_INSTALL_PREFIX "${_mantissa_torch_root}")
  set(TORCH_INCLUDE_DIRS "${_mantissa_torch_root}/include" "${_mantissa_torch_root}/include/torch/csrc/api/include")
  set(TORCH_LIBRARY "${_mantissa_torch_root}/lib/libtorch.so")
  add_library(torch SHARED IMPORTED)
  # libtorch.so is linked even where nothing of ours calls into it (--as-needed would drop
  # it): it is what loads libtorch_cuda.so, and with it CUDA's kernels, into the process.
  set_target_properties(torch PROPERTIES
    IMPORTED_LOCATION "${TORCH_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${TORCH_INCLUDE_DIRS}"
    INTERFACE_COMPILE_DEFINITIONS "USE_DISTRIBUTED;USE_C10D_GLOO;USE_RPC;USE_TENSORPIPE"
    INTERFACE_LINK_LIBRARIES
      "-Wl,--no-as-needed;${TORCH_LIBRARY};${_mantissa_torch_root}/lib/libtorch_cpu.so;${_mantissa_torch_root}/lib/libc10.so;-Wl,--as-needed")
  set(TORCH_LIBRARIES torch)
  set(Torch_FOUND TRUE)
endif()
