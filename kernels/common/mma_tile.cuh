// Tensor-core products of small shared-memory tiles (bf16 operands, fp32 results), for kernels
// that stage every operand in shared memory. WMMA 16x16x16 fragments run on sm_80 and sm_90.
//
// Alignment contract (WMMA): tile base pointers 32-byte aligned; bf16 leading dimensions a
// multiple of 8 elements, fp32 ones a multiple of 4; every 16-row or 16-column step of a tile then
// stays 32-byte aligned when the leading dimension is a multiple of 16 bytes (we pad rows by 16
// bytes to spread shared-memory banks: kLdBf16 = 72, kLdF32 = 68).
#pragma once

#include <cuda_bf16.h>
#include <mma.h>

#include <type_traits>

namespace flame::kernels::tile {

using bf16 = __nv_bfloat16;

constexpr int kLdBf16 = 72;  // leading dimension of a 64-wide bf16 tile: 64 x 72 x 2 = 9216 B
constexpr int kLdF32 = 68;   // leading dimension of a 64-wide fp32 tile: 64 x 68 x 4 = 17408 B

// C[m x n] = (accumulate ? C : 0) + A[m x kd] * B[kd x n]; m, n, kd multiples of 16.
// kARowMajor: A(i, l) = a[i * lda + l], else a[l * lda + i] (A is the transpose of a stored tile).
// kBRowMajor: B(l, j) = b[l * ldb + j], else b[j * ldb + l].
// The warps of the block share the 16x16 output tiles; the caller synchronises around the call.
template <bool kARowMajor, bool kBRowMajor, int kWarps>
__device__ __forceinline__ void Mma(int m, int n, int kd, const bf16* a, int lda, const bf16* b,
                                    int ldb, float* c, int ldc, bool accumulate) {
  namespace wmma = nvcuda::wmma;
  using LayoutA = std::conditional_t<kARowMajor, wmma::row_major, wmma::col_major>;
  using LayoutB = std::conditional_t<kBRowMajor, wmma::row_major, wmma::col_major>;
  const int warp = threadIdx.x / 32;
  const int tiles_n = n / 16;
  for (int tile = warp; tile < (m / 16) * tiles_n; tile += kWarps) {
    const int tm = tile / tiles_n, tn = tile % tiles_n;
    float* pc = c + tm * 16 * ldc + tn * 16;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    if (accumulate) {
      wmma::load_matrix_sync(acc, pc, ldc, wmma::mem_row_major);
    } else {
      wmma::fill_fragment(acc, 0.0f);
    }
#pragma unroll 4
    for (int l = 0; l < kd; l += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, LayoutA> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, LayoutB> fb;
      wmma::load_matrix_sync(fa, kARowMajor ? a + tm * 16 * lda + l : a + l * lda + tm * 16, lda);
      wmma::load_matrix_sync(fb, kBRowMajor ? b + l * ldb + tn * 16 : b + tn * 16 * ldb + l, ldb);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(pc, acc, ldc, wmma::mem_row_major);
  }
}

}  // namespace flame::kernels::tile
