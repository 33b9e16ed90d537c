// Tensor maps for the copy engine's tiled copies (TMA, sm_90; ptx.cuh's TmaLoad2D/3D): the
// driver encodes them on the host, and a kernel takes them as __grid_constant__ parameters. The
// encoder is the driver's, reached through the runtime (cudaGetDriverEntryPointByVersion), so the
// library does not link libcuda itself. Host-side; included by the .cu launchers.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (types only)
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace flame::kernels {

// A bf16 tensor's map for boxes of 64 x 64 elements (128-byte rows, the 128-byte swizzle the
// readers undo: the delta rule's SwizzledAOperand), rank 2 or 3: dims[0] the contiguous
// dimension (elements), byte_strides[i] between steps of dims[i + 1] (multiples of 16), box[i]
// the box's extent in dims[i] (box[0] = 64). Boxes reaching past the tensor read zeros there.
// cudaErrorNotSupported where the driver has no encoder; cudaErrorInvalidValue where it refuses
// the map (alignment, extents).
inline cudaError_t EncodeBf16TileMap(CUtensorMap* map, const void* base, int rank,
                                     const uint64_t* dims, const uint64_t* byte_strides,
                                     const uint32_t* box) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      fn = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  if (encode == nullptr) return cudaErrorNotSupported;
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, static_cast<cuuint32_t>(rank),
                            const_cast<void*>(base), dims, byte_strides, box, element_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace flame::kernels
