// Device helpers shared by the row-wise kernels of the small-op families (norm, l2norm, conv,
// cross_entropy): 16-byte bf16 vector loads and stores, and the "row group" layout in which a
// power-of-two group of threads owns one row and keeps it in registers.
//
// A row of D bf16 values is D/8 vectors of 16 bytes. Thread `lane` of a group of `tpr` threads owns
// vectors lane, lane + tpr, ... (kRowVecs of them), so a warp reads consecutive 16-byte words and
// a thread's columns stay the same for every row it visits (which lets the backward kernels keep
// per-column weight-gradient sums in registers).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/launch_checks.h"

namespace flame::kernels {

inline constexpr int kVecElems = 8;       // bf16 values per 16-byte vector
inline constexpr int kRowVecs = 2;          // vectors per thread per row
inline constexpr int kMaxRowThreads = 512;  // so that __launch_bounds__(512) leaves 128 registers
inline constexpr int kRowBlockThreads = 256;
inline constexpr int kMaxRowDim = kRowVecs * kMaxRowThreads * kVecElems;  // 8192

struct RowLayout {
  int threads_per_row = 1;  // power of two, <= kMaxRowThreads
  int rows_per_block = 1;   // block = threads_per_row * rows_per_block threads
};

// Smallest power-of-two group whose `vecs_per_thread` vectors per thread cover the row.
inline RowLayout ChooseRowLayout(int dim, int vecs_per_thread = kRowVecs) {
  const int vecs = (dim + kVecElems - 1) / kVecElems;
  int tpr = 1;
  while (tpr * vecs_per_thread < vecs) tpr *= 2;
  RowLayout layout;
  layout.threads_per_row = tpr;
  layout.rows_per_block = tpr >= kRowBlockThreads ? 1 : kRowBlockThreads / tpr;
  return layout;
}

__device__ __forceinline__ void LoadBf16x8(const __nv_bfloat16* p, float (&f)[kVecElems]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __bfloat1622float2(h[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

__device__ __forceinline__ void StoreBf16x8(__nv_bfloat16* p, const float (&f)[kVecElems]) {
  uint4 u;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  *reinterpret_cast<uint4*>(p) = u;
}

// N = 4 or 8 bf16 values (8 or 16 bytes) at p, which must be aligned to the access width.
template <int N>
__device__ __forceinline__ void LoadBf16xN(const __nv_bfloat16* p, float (&f)[N]) {
  static_assert(N == 4 || N == 8);
  if constexpr (N == 8) {
    LoadBf16x8(p, f);
  } else {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
    const float2 a = __bfloat1622float2(h[0]), b = __bfloat1622float2(h[1]);
    f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
  }
}

template <int N>
__device__ __forceinline__ void StoreBf16xN(__nv_bfloat16* p, const float (&f)[N]) {
  static_assert(N == 4 || N == 8);
  if constexpr (N == 8) {
    StoreBf16x8(p, f);
  } else {
    uint2 u;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
    h[0] = __floats2bfloat162_rn(f[0], f[1]);
    h[1] = __floats2bfloat162_rn(f[2], f[3]);
    *reinterpret_cast<uint2*>(p) = u;
  }
}

__device__ __forceinline__ float Sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }

// Sum of v over the row group of the calling thread (groups are aligned runs of tpr threads of a
// 1-D block). Every thread of the block must call it the same number of times: for groups wider
// than a warp it passes through __syncthreads. `scratch` is 32 floats of shared memory.
__device__ __forceinline__ float RowGroupSum(float v, int tpr, float* scratch) {
  const int width = tpr < 32 ? tpr : 32;
  for (int offset = width / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  if (tpr <= 32) return v;
  const int warp = threadIdx.x / 32;
  __syncthreads();  // the previous call's readers are done with scratch
  if (threadIdx.x % 32 == 0) scratch[warp] = v;
  __syncthreads();
  const int warps_per_row = tpr / 32;
  const int first = warp / warps_per_row * warps_per_row;
  float sum = 0.0f;
  for (int i = 0; i < warps_per_row; ++i) sum += scratch[first + i];
  return sum;
}

// Deterministic column sums of a (slots, cols) fp32 matrix with row stride ld: out[c] = sum_s
// partial[s * ld + c], overwriting out. The backward kernels write one row of per-column partial
// weight gradients per row group and finish with this instead of racing atomics.
cudaError_t SumPartialRows(const float* partial, int64_t slots, int64_t cols, int64_t ld,
                           float* out, cudaStream_t stream);

}  // namespace flame::kernels
