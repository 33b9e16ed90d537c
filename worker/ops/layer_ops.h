// The fused layer ops around the attention: RMSNorm (+ residual, + swish gate), cross-entropy and
// linear cross-entropy, causal short convolution, L2 norm, rotary embedding and SwiGLU.
//
// Each is one entry point for the model. On CUDA tensors (in a FLAME_CUDA build) it runs our
// kernel (kernels/norm, cross_entropy, conv, l2norm, rotary, activations) inside a
// torch::autograd::Function; on CPU tensors, and for shapes or dtypes a kernel cannot take
// (float64, a feature dimension that is not a multiple of 8, ...; a warning says so once), it
// runs the differentiable ATen reference beside it (`*Reference`), which tests compare against.
//
// Precision: the kernels read and write bf16 with fp32 math; the entry points convert other
// floating dtypes to bf16 on the way in and return outputs in the input's dtype, gradients in each
// input's own dtype (weight gradients are accumulated in fp32 by the kernels). The references
// compute in fp32 (fp64 for fp64 inputs).
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace flame::worker::ops {

// ---- RMSNorm -------------------------------------------------------------------------------
// x [..., D]; residual like x or undefined; weight [D] or undefined (ones); gate like x or
// undefined. h = x + residual; y = h · rsqrt(mean(h²) + eps) · weight · swish(gate).
struct RmsNormOutput {
  torch::Tensor y;             // like x
  torch::Tensor residual_out;  // h, like x; undefined unless a residual was given
};
RmsNormOutput RmsNorm(const torch::Tensor& x, const torch::Tensor& residual,
                      const torch::Tensor& weight, const torch::Tensor& gate, double eps);
RmsNormOutput RmsNormReference(const torch::Tensor& x, const torch::Tensor& residual,
                               const torch::Tensor& weight, const torch::Tensor& gate, double eps);

// ---- Cross-entropy -------------------------------------------------------------------------
inline constexpr int64_t kIgnoreIndex = -100;

// logits [N, V], labels int64 [N]: the mean over rows whose label is not ignore_index (0 when
// there are none), a float32 scalar. inplace_backward lets the CUDA path overwrite bf16 logits
// with their gradient instead of copying them first (fla's inplace_backward): only for logits
// nothing else reads afterwards.
torch::Tensor CrossEntropy(const torch::Tensor& logits, const torch::Tensor& labels,
                           int64_t ignore_index = kIgnoreIndex, bool inplace_backward = false);
torch::Tensor CrossEntropyReference(const torch::Tensor& logits, const torch::Tensor& labels,
                                    int64_t ignore_index = kIgnoreIndex);

// hidden [N, D], weight [V, D] (the lm_head), labels int64 [N]: CrossEntropy(hidden weightᵀ)
// without materialising the [N, V] logits on CUDA (chunks of rows, cuBLAS).
torch::Tensor LinearCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                 const torch::Tensor& labels, int64_t ignore_index = kIgnoreIndex);
torch::Tensor LinearCrossEntropyReference(const torch::Tensor& hidden, const torch::Tensor& weight,
                                          const torch::Tensor& labels,
                                          int64_t ignore_index = kIgnoreIndex);

// ---- Causal short convolution ----------------------------------------------------------------
// x [B, T, D]; weight [D, W] (W <= 4; an nn.Conv1d weight [D, 1, W] is accepted too); bias [D]
// or undefined. y[t] = bias + Σ_k weight[:, k] · x[t - W + 1 + k] (zero before each sequence's
// start), then SiLU when `silu`. cu_seqlens int64 [N + 1] packs sequences (B == 1).
torch::Tensor ShortConv(const torch::Tensor& x, const torch::Tensor& weight,
                        const torch::Tensor& bias, bool silu = true,
                        const torch::Tensor& cu_seqlens = {});
torch::Tensor ShortConvReference(const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& bias, bool silu,
                                 const torch::Tensor& cu_seqlens);

// ---- L2 norm --------------------------------------------------------------------------------
// x [..., D]: x · rsqrt(Σ x² + eps), eps inside the square root (fla's l2norm).
torch::Tensor L2Norm(const torch::Tensor& x, double eps = 1e-6);
torch::Tensor L2NormReference(const torch::Tensor& x, double eps = 1e-6);

// ---- Rotary embedding -----------------------------------------------------------------------
// x [B, T, H, D], rotate-half on the first rotary_dim features (0: all D), theta = position ·
// base^(-2i / rotary_dim); positions count from position_offset at each sequence's start
// (cu_seqlens int64 [N + 1], B == 1, for packed sequences).
struct RotaryOptions {
  int64_t rotary_dim = 0;
  double base = 10000.0;
  int64_t position_offset = 0;
};
torch::Tensor Rotary(const torch::Tensor& x, const RotaryOptions& options,
                     const torch::Tensor& cu_seqlens = {});
torch::Tensor RotaryReference(const torch::Tensor& x, const RotaryOptions& options,
                              const torch::Tensor& cu_seqlens);

// ---- SwiGLU ---------------------------------------------------------------------------------
// gate, up [..., D]: swish(gate) · up.
torch::Tensor SwiGlu(const torch::Tensor& gate, const torch::Tensor& up);
torch::Tensor SwiGluReference(const torch::Tensor& gate, const torch::Tensor& up);

}  // namespace flame::worker::ops
