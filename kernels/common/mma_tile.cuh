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

// TF32 products (MmaTf32Acc64, MmaTf32Tile64, MmaTf32Warp16) take fp32 tiles whose values are
// already TF32 (10-bit mantissa): the tensor cores read the top 19 bits of each 32-bit operand, so
// a kernel rounds a value once where it stages or produces an operand tile (RoundTf32) instead of
// once per fragment load (each element is loaded by two to four warps). An operand left
// unrounded is truncated: a bias of up to one TF32 ulp, not a fault.
__device__ __forceinline__ float RoundTf32(float x) { return nvcuda::wmma::__float_to_tf32(x); }
__device__ __forceinline__ float4 RoundTf32(float4 v) {
  return make_float4(RoundTf32(v.x), RoundTf32(v.y), RoundTf32(v.z), RoundTf32(v.w));
}

// A 64 x 64 fp32 product C = A B accumulated in registers, for kernels that sum several products
// before storing C once (no shared-memory tile for C, no load and store of C per product). Eight
// warps: warp w owns the 16 x 16 tiles (w / 4, w % 4) and (w / 4 + 2, w % 4) of C, which share
// their B fragments and run as two interleaved MMA chains.
struct Tf32Acc64 {
  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 8, float> part[2];

  __device__ __forceinline__ static int Row(int i) { return (threadIdx.x / 32 / 4 + 2 * i) * 16; }
  __device__ __forceinline__ static int Col() { return threadIdx.x / 32 % 4 * 16; }

  __device__ __forceinline__ void Zero() {
#pragma unroll
    for (int i = 0; i < 2; ++i) nvcuda::wmma::fill_fragment(part[i], 0.0f);
  }
  // C = c[64 x 64] (leading dimension ldc), each warp reading only its own tiles.
  __device__ __forceinline__ void Load(const float* c, int ldc) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      nvcuda::wmma::load_matrix_sync(part[i], c + Row(i) * ldc + Col(), ldc,
                                     nvcuda::wmma::mem_row_major);
    }
  }
  // Rounds C to TF32, for a product that becomes an operand.
  __device__ __forceinline__ void RoundToTf32() {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int t = 0; t < part[i].num_elements; ++t) part[i].x[t] = RoundTf32(part[i].x[t]);
    }
  }
  __device__ __forceinline__ void Scale(float f) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int t = 0; t < part[i].num_elements; ++t) part[i].x[t] *= f;
    }
  }
  // c = C, each warp writing only its own tiles; the __syncwarp orders the stores before the
  // warp's next reads of c.
  __device__ __forceinline__ void Store(float* c, int ldc) const {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      nvcuda::wmma::store_matrix_sync(c + Row(i) * ldc + Col(), part[i], ldc,
                                      nvcuda::wmma::mem_row_major);
    }
    __syncwarp();
  }
};

// acc += A[64 x kd] B[kd x 64] from fp32 tiles of TF32 values: for kernels whose operands are
// fp32 scratch, where bf16 would cost accuracy. Same layout flags and alignment contract as Mma
// (fp32 leading dimensions a multiple of 4; kd a multiple of 8).
template <bool kARowMajor, bool kBRowMajor>
__device__ __forceinline__ void MmaTf32Acc64(Tf32Acc64& acc, int kd, const float* a, int lda,
                                             const float* b, int ldb) {
  namespace wmma = nvcuda::wmma;
  using LayoutA = std::conditional_t<kARowMajor, wmma::row_major, wmma::col_major>;
  using LayoutB = std::conditional_t<kBRowMajor, wmma::row_major, wmma::col_major>;
  const int col = Tf32Acc64::Col();
#pragma unroll 4
  for (int l = 0; l < kd; l += 8) {
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, LayoutB> fb;
    wmma::load_matrix_sync(fb, kBRowMajor ? b + l * ldb + col : b + col * ldb + l, ldb);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int row = Tf32Acc64::Row(i);
      wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, LayoutA> fa;
      wmma::load_matrix_sync(fa, kARowMajor ? a + row * lda + l : a + l * lda + row, lda);
      wmma::mma_sync(acc.part[i], fa, fb, acc.part[i]);
    }
  }
}

// C[64 x 64] (+)= A B with C in shared memory. A warp reads and writes only its own tiles of C
// (Tf32Acc64's ownership), the same in every call, so calls that accumulate into one C in turn
// need no block barrier between them.
template <bool kARowMajor, bool kBRowMajor>
__device__ __forceinline__ void MmaTf32Tile64(int kd, const float* a, int lda, const float* b,
                                              int ldb, float* c, int ldc, bool accumulate) {
  Tf32Acc64 acc;
  if (accumulate) {
    acc.Load(c, ldc);
  } else {
    acc.Zero();
  }
  MmaTf32Acc64<kARowMajor, kBRowMajor>(acc, kd, a, lda, b, ldb);
  acc.Store(c, ldc);
}

// One warp's 16 x 16 fp32 accumulator, for kernels that keep C in registers across products.
using Tf32Frag = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 8, float>;

// acc += A[16 x kd] B[kd x 16] by one warp from TF32 values, with a pointing at A(0, 0) and b at
// B(0, 0) (layout flags as Mma). The even and odd k-steps run as two independent MMA chains.
// kd a multiple of 16.
template <bool kARowMajor, bool kBRowMajor>
__device__ __forceinline__ void MmaTf32Warp16(Tf32Frag& acc, int kd, const float* a, int lda,
                                              const float* b, int ldb) {
  namespace wmma = nvcuda::wmma;
  using LayoutA = std::conditional_t<kARowMajor, wmma::row_major, wmma::col_major>;
  using LayoutB = std::conditional_t<kBRowMajor, wmma::row_major, wmma::col_major>;
  Tf32Frag odd;
  wmma::fill_fragment(odd, 0.0f);
#pragma unroll 2
  for (int l0 = 0; l0 < kd; l0 += 16) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int l = l0 + 8 * i;
      wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, LayoutA> fa;
      wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, LayoutB> fb;
      wmma::load_matrix_sync(fa, kARowMajor ? a + l : a + l * lda, lda);
      wmma::load_matrix_sync(fb, kBRowMajor ? b + l * ldb : b + l, ldb);
      if (i == 0) {
        wmma::mma_sync(acc, fa, fb, acc);
      } else {
        wmma::mma_sync(odd, fa, fb, odd);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < acc.num_elements; ++t) acc.x[t] += odd.x[t];
}

}  // namespace flame::kernels::tile
