// Causal depthwise short convolution (kernel size W <= 4) with optional bias and SiLU, forward
// and backward: the ShortConvolution in front of q, k, v of the delta-rule layers.
//
//   z[t, d] = bias[d] + sum_{k<W} weight[d, k] * x[t - (W-1) + k, d],   y = silu(z) or z
//
// where x is zero before the start of t's sequence, so nothing leaks across packed sequences.
// Sequences: B dense sequences of seq_len tokens, or packed ones given by cu_seqlens (device
// int32 [num_seqs + 1], strictly increasing from 0; tokens past the last offset form one more
// sequence). The backward recomputes z from x and writes dx, and dweight and dbias in fp32
// (deterministic: per-block partial sums in the workspace, then a column sum).
//
// x, y, dy, dx are (tokens, D) bf16 at token strides in elements (0 means D); weight is (D, W) and
// bias (D), bf16, contiguous. D must be a multiple of 8, pointers and strides 16-byte aligned;
// otherwise cudaErrorInvalidValue.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace flame::kernels {

inline constexpr int kMaxShortConvWidth = 4;

struct ShortConvForwardParams {
  const __nv_bfloat16* x = nullptr;       // (tokens, D)
  const __nv_bfloat16* weight = nullptr;  // (D, W)
  const __nv_bfloat16* bias = nullptr;    // (D) or null
  __nv_bfloat16* y = nullptr;             // (tokens, D)
  int64_t tokens = 0;
  int dim = 0;          // D
  int kernel_size = 0;  // W, 1..4
  int64_t x_stride = 0, y_stride = 0;
  int seq_len = 0;                      // dense batches; unused with cu_seqlens
  const int32_t* cu_seqlens = nullptr;  // packed batches
  int num_seqs = 0;
  bool silu = true;
};

struct ShortConvBackwardParams {
  const __nv_bfloat16* x = nullptr;       // (tokens, D)
  const __nv_bfloat16* weight = nullptr;  // (D, W)
  const __nv_bfloat16* bias = nullptr;    // (D) or null
  const __nv_bfloat16* dy = nullptr;      // (tokens, D)
  __nv_bfloat16* dx = nullptr;            // (tokens, D)
  float* dweight = nullptr;               // (D, W), overwritten
  float* dbias = nullptr;                 // (D) or null, overwritten
  float* workspace = nullptr;             // ShortConvBackwardWorkspaceBytes(tokens, dim, W)
  int64_t tokens = 0;
  int dim = 0;
  int kernel_size = 0;
  int64_t x_stride = 0, dy_stride = 0, dx_stride = 0;
  int seq_len = 0;
  const int32_t* cu_seqlens = nullptr;
  int num_seqs = 0;
  bool silu = true;
};

cudaError_t ShortConvForward(const ShortConvForwardParams& params, cudaStream_t stream);

size_t ShortConvBackwardWorkspaceBytes(int64_t tokens, int dim, int kernel_size);

cudaError_t ShortConvBackward(const ShortConvBackwardParams& params, cudaStream_t stream);

}  // namespace flame::kernels
