// Tensor-core products of small shared-memory tiles (bf16 or fp32 operands, fp32 results), for
// kernels that stage every operand in shared memory. WMMA fragments run on sm_80 and sm_90.
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

// The same product for a 64 x 64 C from fp32 tiles, by 8 warps, rounded to TF32 (10-bit mantissa)
// on the way into the tensor cores: for kernels whose operands are fp32 scratch, where bf16 would
// cost accuracy. Same layout flags and alignment contract (fp32 leading dimensions a multiple of
// 4; kd a multiple of 8). Warp w owns the output tiles (w / 4, w % 4) and (w / 4 + 2, w % 4),
// which share their B fragments, and runs the two accumulations interleaved (two independent MMA
// chains). A warp owns the same tiles in every call, so calls that accumulate into one C in turn
// need no block barrier between them (the __syncwarp orders a warp's store before its own next
// load).
template <bool kARowMajor, bool kBRowMajor>
__device__ __forceinline__ void MmaTf32Tile64(int kd, const float* a, int lda, const float* b,
                                              int ldb, float* c, int ldc, bool accumulate) {
  namespace wmma = nvcuda::wmma;
  using LayoutA = std::conditional_t<kARowMajor, wmma::row_major, wmma::col_major>;
  using LayoutB = std::conditional_t<kBRowMajor, wmma::row_major, wmma::col_major>;
  const int warp = threadIdx.x / 32, tn = warp % 4, tm0 = warp / 4;
  wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float* pc = c + (tm0 + 2 * i) * 16 * ldc + tn * 16;
    if (accumulate) {
      wmma::load_matrix_sync(acc[i], pc, ldc, wmma::mem_row_major);
    } else {
      wmma::fill_fragment(acc[i], 0.0f);
    }
  }
#pragma unroll 4
  for (int l = 0; l < kd; l += 8) {
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, LayoutB> fb;
    wmma::load_matrix_sync(fb, kBRowMajor ? b + l * ldb + tn * 16 : b + tn * 16 * ldb + l, ldb);
#pragma unroll
    for (int t = 0; t < fb.num_elements; ++t) fb.x[t] = wmma::__float_to_tf32(fb.x[t]);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int tm = tm0 + 2 * i;
      wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, LayoutA> fa;
      wmma::load_matrix_sync(fa, kARowMajor ? a + tm * 16 * lda + l : a + l * lda + tm * 16, lda);
#pragma unroll
      for (int t = 0; t < fa.num_elements; ++t) fa.x[t] = wmma::__float_to_tf32(fa.x[t]);
      wmma::mma_sync(acc[i], fa, fb, acc[i]);
    }
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    wmma::store_matrix_sync(c + (tm0 + 2 * i) * 16 * ldc + tn * 16, acc[i], ldc,
                            wmma::mem_row_major);
  }
  __syncwarp();
}

// The same for a 64 x 32 C (8 warps, one 16 x 16 tile each: warp w owns (w / 2, w % 2)); the
// even and odd k-steps accumulate apart, for two independent MMA chains. kd a multiple of 16.
template <bool kARowMajor, bool kBRowMajor>
__device__ __forceinline__ void MmaTf32Tile64x32(int kd, const float* a, int lda, const float* b,
                                                 int ldb, float* c, int ldc, bool accumulate) {
  namespace wmma = nvcuda::wmma;
  using LayoutA = std::conditional_t<kARowMajor, wmma::row_major, wmma::col_major>;
  using LayoutB = std::conditional_t<kBRowMajor, wmma::row_major, wmma::col_major>;
  const int warp = threadIdx.x / 32, tm = warp / 2, tn = warp % 2;
  float* pc = c + tm * 16 * ldc + tn * 16;
  wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[2];
  if (accumulate) {
    wmma::load_matrix_sync(acc[0], pc, ldc, wmma::mem_row_major);
  } else {
    wmma::fill_fragment(acc[0], 0.0f);
  }
  wmma::fill_fragment(acc[1], 0.0f);
#pragma unroll 2
  for (int l0 = 0; l0 < kd; l0 += 16) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int l = l0 + 8 * i;
      wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, LayoutA> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, LayoutB> fb;
      wmma::load_matrix_sync(fa, kARowMajor ? a + tm * 16 * lda + l : a + l * lda + tm * 16, lda);
      wmma::load_matrix_sync(fb, kBRowMajor ? b + l * ldb + tn * 16 : b + tn * 16 * ldb + l, ldb);
#pragma unroll
      for (int t = 0; t < fa.num_elements; ++t) fa.x[t] = wmma::__float_to_tf32(fa.x[t]);
#pragma unroll
      for (int t = 0; t < fb.num_elements; ++t) fb.x[t] = wmma::__float_to_tf32(fb.x[t]);
      wmma::mma_sync(acc[i], fa, fb, acc[i]);
    }
  }
#pragma unroll
  for (int t = 0; t < acc[0].num_elements; ++t) acc[0].x[t] += acc[1].x[t];
  wmma::store_matrix_sync(pc, acc[0], ldc, wmma::mem_row_major);
  __syncwarp();
}

}  // namespace flame::kernels::tile
