// Fused linear cross-entropy: the lm_head matmul and the cross-entropy together, in chunks of rows
// so that the full [N, V] logits never exist (fla's FusedLinearCrossEntropyLoss). Per chunk of C
// rows, with cuBLAS for the three matmuls (bf16 operands, fp32 accumulation):
//
//   logits = hidden_c weight^T            [C, V] bf16, in the workspace
//   cross-entropy rows (cross_entropy.h)  loss terms and dlogits in place, divided by n_valid
//   dhidden_c = dlogits weight            [C, D] bf16
//   dweight  += dlogits^T hidden_c        [V, D] fp32 accumulator (fla's accumulate_grad_in_fp32)
//
// Like fla, the gradients are computed in the forward; the autograd backward only scales them by
// the incoming gradient. Loss semantics (ignore_index, mean over valid rows, empty batch) are
// those of cross_entropy.h. The cuBLAS handle is set to `stream`. cuBLAS failures come back as
// cudaErrorUnknown; bad arguments as cudaErrorInvalidValue.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cross_entropy/cross_entropy.h"

namespace flame::kernels {

struct LinearCrossEntropyParams {
  const __nv_bfloat16* hidden = nullptr;  // (N, D), contiguous
  const __nv_bfloat16* weight = nullptr;  // (V, D), contiguous
  const int64_t* labels = nullptr;        // (N)
  float* loss = nullptr;                  // (1)
  __nv_bfloat16* dhidden = nullptr;       // (N, D)
  float* dweight = nullptr;               // (V, D) fp32
  bool accumulate_dweight = false;        // add into dweight instead of overwriting it
  void* workspace = nullptr;              // LinearCrossEntropyWorkspaceBytes(...) bytes
  cublasHandle_t cublas = nullptr;
  int64_t rows = 0;     // N
  int dim = 0;          // D, a multiple of 8
  int vocab = 0;        // V, a multiple of 8
  int chunk_rows = 0;   // C; 0 picks LinearCrossEntropyDefaultChunk(N, D, V)
  int64_t ignore_index = kIgnoreIndex;
};

// fla's choice of chunk: C = next_pow2(ceil(N / min(8, ceil(V / D)))), capped at N; the chunk's
// logits (C x V) are then a few times the size of the hidden states (N x D), not V/D times.
int LinearCrossEntropyDefaultChunk(int64_t rows, int dim, int vocab);

size_t LinearCrossEntropyWorkspaceBytes(int64_t rows, int vocab, int chunk_rows);

cudaError_t LinearCrossEntropyForwardBackward(const LinearCrossEntropyParams& params,
                                              cudaStream_t stream);

}  // namespace flame::kernels
