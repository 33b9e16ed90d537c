// Rotary kernel: one thread per (token, group of 8 feature pairs), looping over the heads, so each
// cos/sin pair is computed once per token and reused by all H heads.
#include "kernels/rotary/rotary.h"

#include "kernels/norm/row_ops.cuh"

namespace flame::kernels {
namespace {

constexpr int kThreads = 256;

// Position of token t in its sequence (see RotaryParams).
__device__ __forceinline__ int64_t PositionOf(const RotaryParams& p, int64_t t) {
  if (p.cu_seqlens == nullptr) return t % p.seq_len;
  int lo = 0, hi = p.num_seqs;  // largest n with cu_seqlens[n] <= t
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.cu_seqlens[mid] <= t) lo = mid; else hi = mid - 1;
  }
  return t - p.cu_seqlens[lo];
}

template <bool kInverse>
__global__ void __launch_bounds__(kThreads) RotaryKernel(RotaryParams p, int pair_vecs, int tail_vecs) {
  const int items = pair_vecs + tail_vecs;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= p.tokens * items) return;
  const int64_t t = idx / items;
  const int item = static_cast<int>(idx - t * items);
  const __nv_bfloat16* x = p.x + t * p.x_token_stride;
  __nv_bfloat16* y = p.y + t * p.y_token_stride;

  if (item >= pair_vecs) {  // features past rotary_dim: copy when out of place
    if (p.x == p.y) return;
    const int c = p.rotary_dim + (item - pair_vecs) * kVecElems;
    for (int h = 0; h < p.heads; ++h) {
      *reinterpret_cast<uint4*>(y + h * p.y_head_stride + c) =
          *reinterpret_cast<const uint4*>(x + h * p.x_head_stride + c);
    }
    return;
  }

  const int half = p.rotary_dim / 2;
  const int i0 = item * kVecElems;
  const float position = static_cast<float>(PositionOf(p, t) + p.position_offset);
  float cos_t[kVecElems], sin_t[kVecElems];
#pragma unroll
  for (int k = 0; k < kVecElems; ++k) {
    // fp32 throughout, as fla builds its cache: inv_freq, then position * inv_freq, then cos/sin.
    const float exponent = static_cast<float>(2 * (i0 + k)) / static_cast<float>(p.rotary_dim);
    const float inv_freq = 1.0f / powf(p.base, exponent);
    sincosf(position * inv_freq, &sin_t[k], &cos_t[k]);
    if (kInverse) sin_t[k] = -sin_t[k];
  }
#pragma unroll 4  // several heads' loads in flight per thread
  for (int h = 0; h < p.heads; ++h) {
    float x1[kVecElems], x2[kVecElems], y1[kVecElems], y2[kVecElems];
    LoadBf16x8(x + h * p.x_head_stride + i0, x1);
    LoadBf16x8(x + h * p.x_head_stride + half + i0, x2);
#pragma unroll
    for (int k = 0; k < kVecElems; ++k) {
      y1[k] = x1[k] * cos_t[k] - x2[k] * sin_t[k];
      y2[k] = x2[k] * cos_t[k] + x1[k] * sin_t[k];
    }
    StoreBf16x8(y + h * p.y_head_stride + i0, y1);
    StoreBf16x8(y + h * p.y_head_stride + half + i0, y2);
  }
}

template <bool kInverse>
cudaError_t Launch(const RotaryParams& params, cudaStream_t stream) {
  RotaryParams p = params;
  if (p.rotary_dim == 0) p.rotary_dim = p.head_dim;
  if (p.x_head_stride == 0) p.x_head_stride = p.head_dim;
  if (p.x_token_stride == 0) p.x_token_stride = p.x_head_stride * p.heads;
  if (p.y_head_stride == 0) p.y_head_stride = p.head_dim;
  if (p.y_token_stride == 0) p.y_token_stride = p.y_head_stride * p.heads;
  const bool strides_ok = p.x_head_stride % kVecElems == 0 && p.x_token_stride % kVecElems == 0 &&
                          p.y_head_stride % kVecElems == 0 && p.y_token_stride % kVecElems == 0;
  if (p.x == nullptr || p.y == nullptr || !IsAligned16(p.x) || !IsAligned16(p.y) || !strides_ok ||
      p.tokens < 0 || p.heads <= 0 || p.head_dim <= 0 || p.head_dim % kVecElems != 0 ||
      p.rotary_dim <= 0 || p.rotary_dim % (2 * kVecElems) != 0 || p.rotary_dim > p.head_dim ||
      (p.cu_seqlens == nullptr && p.seq_len <= 0) || (p.cu_seqlens != nullptr && p.num_seqs <= 0)) {
    return cudaErrorInvalidValue;
  }
  if (p.tokens == 0) return cudaSuccess;
  const int pair_vecs = p.rotary_dim / (2 * kVecElems);
  const int tail_vecs = (p.head_dim - p.rotary_dim) / kVecElems;
  const int64_t work = p.tokens * (pair_vecs + tail_vecs);
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  RotaryKernel<kInverse><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p, pair_vecs,
                                                                                 tail_vecs);
  return cudaGetLastError();
}

}  // namespace

cudaError_t RotaryForward(const RotaryParams& params, cudaStream_t stream) {
  return Launch<false>(params, stream);
}

cudaError_t RotaryBackward(const RotaryParams& params, cudaStream_t stream) {
  return Launch<true>(params, stream);
}

}  // namespace flame::kernels
