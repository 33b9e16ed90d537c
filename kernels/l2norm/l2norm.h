// Row-wise L2 normalisation, forward and backward: y = x * rsqrt(sum(x^2) + eps), eps = 1e-6
// inside the square root (fla's l2norm, used on q and k of the delta-rule layers).
//
// bf16 rows with fp32 math. The backward recomputes rstd from x (one extra reduction over a row
// it reads anyway) instead of saving it:  dx = rstd * (dy - y * sum(dy * y)).
// D must be a multiple of 8 and at most kMaxRowDim (8192); pointers and row strides (elements;
// 0 means D) 16-byte aligned; otherwise cudaErrorInvalidValue.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace flame::kernels {

struct L2NormForwardParams {
  const __nv_bfloat16* x = nullptr;  // (R, D)
  __nv_bfloat16* y = nullptr;        // (R, D)
  float* rstd = nullptr;             // (R) or null
  int64_t rows = 0;
  int dim = 0;
  int64_t x_stride = 0, y_stride = 0;
  float eps = 1e-6f;
};

struct L2NormBackwardParams {
  const __nv_bfloat16* x = nullptr;   // (R, D): the forward's input
  const __nv_bfloat16* dy = nullptr;  // (R, D)
  __nv_bfloat16* dx = nullptr;        // (R, D)
  int64_t rows = 0;
  int dim = 0;
  int64_t x_stride = 0, dy_stride = 0, dx_stride = 0;
  float eps = 1e-6f;
};

cudaError_t L2NormForward(const L2NormForwardParams& params, cudaStream_t stream);
cudaError_t L2NormBackward(const L2NormBackwardParams& params, cudaStream_t stream);

}  // namespace flame::kernels
