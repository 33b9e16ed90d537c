// Fused linear cross-entropy: a host loop over chunks of rows; see linear_cross_entropy.h.
//
// cuBLAS is column-major. A row-major (R, C) matrix is a column-major (C, R) one, so each
// row-major product below is computed as its transpose:
//   logits  (C,V) = h (C,D) W^T      ->  logits^T (V,C) = op_T(W as (D,V)) . h^T (D,C)
//   dhidden (C,D) = dl (C,V) W       ->  dh^T (D,C)     = W^T (D,V) . dl^T (V,C)
//   dW      (V,D) += dl^T (V,C) h    ->  dW^T (D,V)     = h^T (D,C) . op_T(dl^T as (V,C))
#include "kernels/cross_entropy/linear_cross_entropy.h"

#include "kernels/cross_entropy/cross_entropy_rows.h"

namespace flame::kernels {
namespace {

constexpr size_t AlignUp(size_t n) { return (n + 255) / 256 * 256; }

cudaError_t FromCublas(cublasStatus_t status) {
  return status == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
}

// C (m x n, ldc) = alpha op(A) op(B) + beta C with bf16 A and B and fp32 accumulation.
cublasStatus_t Gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                    int k, const void* a, int lda, const void* b, int ldb, float beta, void* c,
                    cudaDataType c_type, int ldc) {
  const float alpha = 1.0f;
  return cublasGemmEx(h, ta, tb, m, n, k, &alpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &beta,
                      c, c_type, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

}  // namespace

int LinearCrossEntropyDefaultChunk(int64_t rows, int dim, int vocab) {
  int64_t chunks = (vocab + dim - 1) / dim;
  if (chunks > 8) chunks = 8;
  if (chunks < 1) chunks = 1;
  const int64_t target = (rows + chunks - 1) / chunks;
  int64_t c = 1;
  while (c < target) c *= 2;
  return static_cast<int>(c < rows ? c : (rows > 0 ? rows : 1));
}

size_t LinearCrossEntropyWorkspaceBytes(int64_t rows, int vocab, int chunk_rows) {
  return AlignUp(static_cast<size_t>(chunk_rows) * vocab * sizeof(__nv_bfloat16)) +
         AlignUp(static_cast<size_t>(rows) * sizeof(float)) + 256;
}

cudaError_t LinearCrossEntropyForwardBackward(const LinearCrossEntropyParams& params,
                                              cudaStream_t stream) {
  LinearCrossEntropyParams p = params;
  if (p.chunk_rows == 0) p.chunk_rows = LinearCrossEntropyDefaultChunk(p.rows, p.dim, p.vocab);
  if (p.hidden == nullptr || p.weight == nullptr || p.labels == nullptr || p.loss == nullptr ||
      p.dhidden == nullptr || p.dweight == nullptr || p.workspace == nullptr ||
      p.cublas == nullptr || p.rows < 0 || p.rows > 0x7fffffff || p.dim <= 0 || p.dim % 8 != 0 ||
      p.vocab <= 0 || p.vocab % 8 != 0 || p.chunk_rows <= 0) {
    return cudaErrorInvalidValue;
  }
  char* ws = static_cast<char*>(p.workspace);
  auto* logits = reinterpret_cast<__nv_bfloat16*>(ws);
  ws += AlignUp(static_cast<size_t>(p.chunk_rows) * p.vocab * sizeof(__nv_bfloat16));
  auto* row_loss = reinterpret_cast<float*>(ws);
  ws += AlignUp(static_cast<size_t>(p.rows) * sizeof(float));
  auto* num_valid = reinterpret_cast<int32_t*>(ws);

  if (cudaError_t err = FromCublas(cublasSetStream(p.cublas, stream))) return err;
  if (cudaError_t err = CountValidLabels(p.labels, p.rows, p.ignore_index, num_valid, stream)) {
    return err;
  }
  if (p.rows == 0 && !p.accumulate_dweight) {
    if (cudaError_t err = cudaMemsetAsync(
            p.dweight, 0, static_cast<size_t>(p.vocab) * p.dim * sizeof(float), stream)) {
      return err;
    }
  }
  for (int64_t r0 = 0; r0 < p.rows; r0 += p.chunk_rows) {
    const int c = static_cast<int>(p.rows - r0 < p.chunk_rows ? p.rows - r0 : p.chunk_rows);
    const __nv_bfloat16* h = p.hidden + r0 * p.dim;
    cublasStatus_t st = Gemm(p.cublas, CUBLAS_OP_T, CUBLAS_OP_N, p.vocab, c, p.dim, p.weight,
                             p.dim, h, p.dim, 0.0f, logits, CUDA_R_16BF, p.vocab);
    if (st != CUBLAS_STATUS_SUCCESS) return FromCublas(st);
    if (cudaError_t err = CrossEntropyRows(logits, p.vocab, p.labels + r0, c, p.vocab,
                                           p.ignore_index, num_valid, row_loss + r0, nullptr,
                                           stream)) {
      return err;
    }
    st = Gemm(p.cublas, CUBLAS_OP_N, CUBLAS_OP_N, p.dim, c, p.vocab, p.weight, p.dim, logits,
              p.vocab, 0.0f, p.dhidden + r0 * p.dim, CUDA_R_16BF, p.dim);
    if (st != CUBLAS_STATUS_SUCCESS) return FromCublas(st);
    const float beta = (r0 == 0 && !p.accumulate_dweight) ? 0.0f : 1.0f;
    st = Gemm(p.cublas, CUBLAS_OP_N, CUBLAS_OP_T, p.dim, p.vocab, c, h, p.dim, logits, p.vocab,
              beta, p.dweight, CUDA_R_32F, p.dim);
    if (st != CUBLAS_STATUS_SUCCESS) return FromCublas(st);
  }
  return MeanRowLoss(row_loss, p.rows, num_valid, p.loss, stream);
}

}  // namespace flame::kernels
