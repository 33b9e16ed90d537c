# LibTorch as two imported targets, without Torch's own CMake package.
#
# Torch's package configuration insists on finding every CUDA library the wheel was built against
# (cuSPARSELt, cuFile, NVSHMEM, ...), which a CPU host does not have. We need far less:
#   flame::torch       headers + libtorch_cpu + libc10: all a CPU worker needs;
#   flame::torch_cuda  adds libtorch_cuda + libc10_cuda, for the `cuda` preset on GPU hosts.
#
# FLAME_TORCH_DIR points at an unpacked `torch` wheel (include/, lib/). deploy/install-deps.sh
# puts one at /opt/flame/torch-2.11.0; on a GPU host the Python torch's own folder works.

set(FLAME_TORCH_DIR "" CACHE PATH "Root of an unpacked torch wheel")
if(NOT FLAME_TORCH_DIR)  # the presets pass $FLAME_TORCH_DIR, which may be unset
  set(FLAME_TORCH_DIR "/opt/flame/torch-2.11.0" CACHE PATH "Root of an unpacked torch wheel" FORCE)
endif()

if(NOT EXISTS "${FLAME_TORCH_DIR}/lib/libtorch_cpu.so")
  message(FATAL_ERROR "LibTorch not found at FLAME_TORCH_DIR=${FLAME_TORCH_DIR}; "
                      "run deploy/install-deps.sh or pass -DFLAME_TORCH_DIR=...")
endif()

add_library(flame_torch INTERFACE)
add_library(flame::torch ALIAS flame_torch)
# SYSTEM: Torch's headers are not ours to warn about (-Werror applies to our code only).
target_include_directories(flame_torch SYSTEM INTERFACE
  "${FLAME_TORCH_DIR}/include"
  "${FLAME_TORCH_DIR}/include/torch/csrc/api/include")
target_link_libraries(flame_torch INTERFACE
  "${FLAME_TORCH_DIR}/lib/libtorch_cpu.so"
  "${FLAME_TORCH_DIR}/lib/libc10.so")
# The wheel is built with the C++11 ABI; c10d's headers need USE_DISTRIBUTED/USE_C10D to declare
# the store and process-group types.
target_compile_definitions(flame_torch INTERFACE
  _GLIBCXX_USE_CXX11_ABI=1 USE_DISTRIBUTED USE_C10D)
set_target_properties(flame_torch PROPERTIES
  INTERFACE_LINK_OPTIONS "-Wl,-rpath,${FLAME_TORCH_DIR}/lib")

if(FLAME_CUDA)
  add_library(flame_torch_cuda INTERFACE)
  add_library(flame::torch_cuda ALIAS flame_torch_cuda)
  target_link_libraries(flame_torch_cuda INTERFACE
    flame::torch
    "-Wl,--no-as-needed"
    "${FLAME_TORCH_DIR}/lib/libtorch_cuda.so"
    "${FLAME_TORCH_DIR}/lib/libc10_cuda.so"
    "-Wl,--as-needed"
    CUDA::cudart)
  target_compile_definitions(flame_torch_cuda INTERFACE USE_CUDA USE_C10D_NCCL FLAME_WITH_CUDA)

  # libtorch_cuda.so needs libcufile.so.0 and libcusparseLt.so.0, and libtorch_nvshmem.so needs
  # libnvshmem_host.so.3. The wheel finds them in its sibling nvidia/ packages (its RPATH is
  # $ORIGIN/../../nvidia/...), which a Python torch on a GPU host has. The CUDA toolkit does not
  # ship them, so on a CPU host with only the unpacked wheel (CI, development) the linker cannot
  # resolve what libtorch_cuda itself leaves undefined and refuses every executable. Only
  # libtorch_cuda calls into these libraries, never our code, so there, and only there, the
  # executables that link flame::torch_cuda are linked with --allow-shlib-undefined: undefined
  # symbols in our own objects are still errors, and nothing is stubbed or shipped. Such binaries
  # build (the CUDA code compiles and links) but need those libraries to start; the GPU host's
  # torch has them, and a build there keeps the full link check.
  set(_flame_torch_cuda_needs libcufile.so.0 libcusparseLt.so.0 libnvshmem_host.so.3)
  file(GLOB _flame_nvidia_lib_dirs LIST_DIRECTORIES true "${FLAME_TORCH_DIR}/../nvidia/*/lib")
  set(_flame_missing "")
  foreach(_lib IN LISTS _flame_torch_cuda_needs)
    find_file(_flame_found_${_lib} NAMES ${_lib}
              HINTS ${_flame_nvidia_lib_dirs} ${CUDAToolkit_LIBRARY_DIR} "${FLAME_TORCH_DIR}/lib"
              PATHS /usr/lib/x86_64-linux-gnu /usr/local/lib NO_CACHE)
    if(NOT _flame_found_${_lib})
      list(APPEND _flame_missing ${_lib})
    endif()
  endforeach()
  if(_flame_missing)
    message(STATUS "LibTorch CUDA: ${_flame_missing} not found (CPU host?); linking with "
                   "--allow-shlib-undefined, binaries need them at run time")
    target_link_options(flame_torch_cuda INTERFACE "LINKER:--allow-shlib-undefined")
  endif()
endif()
