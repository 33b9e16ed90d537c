// Fused cross-entropy over [N, V] logits, forward and backward in one pass, as fla's
// FusedCrossEntropyLoss(inplace_backward=True):
//
//   lse_r = log sum_j exp(logits[r, j])                                    (fp32)
//   loss  = (1 / n_valid) * sum over rows with label != ignore_index of (lse_r - logits[r, label_r])
//   dlogits[r, j] = (exp(logits[r, j] - lse_r) - [j == label_r]) / n_valid, 0 on ignored rows
//
// dlogits (the gradient of the mean loss) overwrites the logits, so no second [N, V] tensor
// exists; the autograd backward only scales it by the incoming gradient. A batch with no valid
// row gives loss 0 and zero gradients rather than 0/0. A label outside [0, V) that is not
// ignore_index makes that row's loss NaN, so the bug shows.
//
// logits are bf16 rows at a row stride in elements (0 means V); V and the stride must be
// multiples of 8 and the pointer 16-byte aligned; otherwise cudaErrorInvalidValue.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace flame::kernels {

inline constexpr int64_t kIgnoreIndex = -100;

struct CrossEntropyParams {
  __nv_bfloat16* logits = nullptr;   // (N, V): logits in, d(loss)/d(logits) out
  const int64_t* labels = nullptr;   // (N)
  float* loss = nullptr;             // (1): mean over non-ignored rows
  float* lse = nullptr;              // (N) or null: per-row log-sum-exp
  void* workspace = nullptr;         // CrossEntropyWorkspaceBytes(rows) bytes
  int64_t rows = 0;                  // N
  int vocab = 0;                     // V
  int64_t logits_stride = 0;
  int64_t ignore_index = kIgnoreIndex;
};

size_t CrossEntropyWorkspaceBytes(int64_t rows);

cudaError_t CrossEntropyForwardBackward(const CrossEntropyParams& params, cudaStream_t stream);

}  // namespace flame::kernels
