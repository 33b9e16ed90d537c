// SwiGLU, forward and backward: y = swish(gate) * up = gate * sigmoid(gate) * up, the MLP's
// activation. bf16 in and out, fp32 math.
//
// The backward takes gate and up (not y) and can also write y again, for callers that recompute
// the activation instead of keeping it (fla's SwiGLULinear saves only gate, up and the weight):
//   dgate = dy * up * s * (1 + gate * (1 - s)),   dup = dy * gate * s,   s = sigmoid(gate).
// Tensors are (R, D) rows at row strides in elements (0 means D), so gate and up may be the two
// halves of one fused projection (stride 2D). D must be a multiple of 8, pointers and strides
// 16-byte aligned; otherwise cudaErrorInvalidValue.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace flame::kernels {

struct SwiGluForwardParams {
  const __nv_bfloat16* gate = nullptr;  // (R, D)
  const __nv_bfloat16* up = nullptr;    // (R, D)
  __nv_bfloat16* y = nullptr;           // (R, D)
  int64_t rows = 0;
  int64_t dim = 0;
  int64_t gate_stride = 0, up_stride = 0, y_stride = 0;
};

struct SwiGluBackwardParams {
  const __nv_bfloat16* gate = nullptr;  // (R, D)
  const __nv_bfloat16* up = nullptr;    // (R, D)
  const __nv_bfloat16* dy = nullptr;    // (R, D)
  __nv_bfloat16* dgate = nullptr;       // (R, D)
  __nv_bfloat16* dup = nullptr;         // (R, D)
  __nv_bfloat16* y = nullptr;           // (R, D) or null: the recomputed forward output
  int64_t rows = 0;
  int64_t dim = 0;
  int64_t gate_stride = 0, up_stride = 0, dy_stride = 0, dgate_stride = 0, dup_stride = 0,
          y_stride = 0;
};

cudaError_t SwiGluForward(const SwiGluForwardParams& params, cudaStream_t stream);
cudaError_t SwiGluBackward(const SwiGluBackwardParams& params, cudaStream_t stream);

}  // namespace flame::kernels
