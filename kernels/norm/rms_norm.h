// Fused RMSNorm, forward and backward, for the block's pre-norms and the mixers' output norm.
//
//   h = x (+ residual)                      the optional residual add of a pre-norm block
//   y = h * rstd * weight (* swish(gate))   rstd = 1 / sqrt(mean(h^2) + eps), in fp32
//
// With a residual the forward also writes h ("prenorm": the summed residual stream the next block
// adds to), which saves a separate add kernel and one pass over the stream. With a gate it is fla's
// FusedRMSNormGated, applied per head: rows are (token, head) pairs and D is the head dim. The
// backward recomputes the normalised row from h and the saved rstd rather than storing it.
//
// All tensors are bf16 with fp32 math, except rstd and dweight (fp32). Rows are R rows of D
// contiguous values at a row stride (elements; 0 means D). D must be a multiple of 8 and at most
// kMaxRowDim, and every pointer and row stride 16-byte aligned; otherwise cudaErrorInvalidValue.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace flame::kernels {

struct RmsNormForwardParams {
  // Inputs.
  const __nv_bfloat16* x = nullptr;         // (R, D)
  const __nv_bfloat16* residual = nullptr;  // (R, D) or null: added to x before the norm
  const __nv_bfloat16* weight = nullptr;    // (D) or null: a weight of ones
  const __nv_bfloat16* gate = nullptr;      // (R, D) or null: output times swish(gate)
  // Outputs.
  __nv_bfloat16* y = nullptr;             // (R, D)
  __nv_bfloat16* residual_out = nullptr;  // (R, D) or null: h = x + residual (or a copy of x)
  float* rstd = nullptr;                  // (R) or null: saved for the backward
  // Sizes and row strides.
  int64_t rows = 0;
  int dim = 0;
  int64_t x_stride = 0, residual_stride = 0, gate_stride = 0, y_stride = 0,
          residual_out_stride = 0;
  float eps = 1e-6f;
};

struct RmsNormBackwardParams {
  // Inputs.
  const __nv_bfloat16* h = nullptr;              // (R, D): x + residual (residual_out), or x
  const __nv_bfloat16* weight = nullptr;         // (D) or null
  const __nv_bfloat16* gate = nullptr;           // (R, D) or null
  const float* rstd = nullptr;                   // (R), from the forward
  const __nv_bfloat16* dy = nullptr;             // (R, D)
  const __nv_bfloat16* dresidual_out = nullptr;  // (R, D) or null: gradient reaching h directly
  // Outputs.
  __nv_bfloat16* dx = nullptr;     // (R, D): d/dx, which is also d/dresidual
  __nv_bfloat16* dgate = nullptr;  // (R, D), needed when gate is set
  float* dweight = nullptr;        // (D), fp32, overwritten; needed when weight is set
  float* workspace = nullptr;      // RmsNormBackwardWorkspaceBytes(rows, dim) bytes
  // Sizes and row strides.
  int64_t rows = 0;
  int dim = 0;
  int64_t h_stride = 0, gate_stride = 0, dy_stride = 0, dresidual_out_stride = 0, dx_stride = 0,
          dgate_stride = 0;
};

cudaError_t RmsNormForward(const RmsNormForwardParams& params, cudaStream_t stream);

// Scratch for the per-row-group partial weight gradients (at most about 1024 x D floats).
size_t RmsNormBackwardWorkspaceBytes(int64_t rows, int dim);

cudaError_t RmsNormBackward(const RmsNormBackwardParams& params, cudaStream_t stream);

}  // namespace flame::kernels
