// Cross-entropy kernels: one block per row. Pass 1 streams the row once with an online max/sum in
// fp32 and keeps it in registers when it fits (V <= 32768 with 1024 threads: one read and one
// write of the logits); longer rows are read again in pass 2, from L2 mostly.
#include "kernels/cross_entropy/cross_entropy.h"

#include <cfloat>

#include "kernels/cross_entropy/cross_entropy_rows.h"
#include "kernels/norm/row_ops.cuh"

namespace flame::kernels {
namespace {

constexpr int kCeVecs = 4;  // 16-byte vectors per thread per tile, kept raw (4 registers each)
constexpr int kMaxThreads = 1024;

__device__ __forceinline__ void Unpack(const uint4& u, float (&f)[kVecElems]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __bfloat1622float2(h[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}

// (max, sum of exp(x - max)) pairs combine associatively; -FLT_MAX (not -inf) as the empty max
// keeps exp(m - m') finite for threads that saw nothing.
__device__ __forceinline__ void Combine(float& m, float& s, float m2, float s2) {
  const float mm = fmaxf(m, m2);
  s = s * __expf(m - mm) + s2 * __expf(m2 - mm);
  m = mm;
}

__global__ void __launch_bounds__(kMaxThreads)
    CrossEntropyRowsKernel(__nv_bfloat16* logits, int64_t stride, const int64_t* labels,
                           int vocab, int64_t ignore_index, const int32_t* num_valid,
                           float* row_loss, float* lse_out) {
  __shared__ float warp_m[32], warp_s[32];
  const int64_t row = blockIdx.x;
  __nv_bfloat16* x = logits + row * stride;
  const int64_t label = labels[row];
  const bool label_ok = label >= 0 && label < vocab;
  // Read before the reduction's barriers: after them other threads overwrite the row.
  const float label_logit =
      threadIdx.x == 0 && label_ok ? __bfloat162float(x[label]) : 0.0f;

  const int threads = blockDim.x;
  const int tile = threads * kCeVecs * kVecElems;
  const int tiles = (vocab + tile - 1) / tile;
  uint4 cache[kCeVecs];
  float m = -FLT_MAX, s = 0.0f;
  for (int t = 0; t < tiles; ++t) {
    // All of the tile's loads first, then one max and one exp per value: a single rescale of the
    // running sum per tile keeps the special-function unit off the critical path.
    float tile_max = -FLT_MAX;
#pragma unroll
    for (int v = 0; v < kCeVecs; ++v) {
      const int c = t * tile + (v * threads + threadIdx.x) * kVecElems;
      if (c < vocab) cache[v] = *reinterpret_cast<const uint4*>(x + c);
    }
#pragma unroll
    for (int v = 0; v < kCeVecs; ++v) {
      const int c = t * tile + (v * threads + threadIdx.x) * kVecElems;
      if (c >= vocab) continue;
      float f[kVecElems];
      Unpack(cache[v], f);
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) tile_max = fmaxf(tile_max, f[i]);
    }
    float tile_sum = 0.0f;
#pragma unroll
    for (int v = 0; v < kCeVecs; ++v) {
      const int c = t * tile + (v * threads + threadIdx.x) * kVecElems;
      if (c >= vocab) continue;
      float f[kVecElems];
      Unpack(cache[v], f);
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) tile_sum += __expf(f[i] - tile_max);
    }
    Combine(m, s, tile_max, tile_sum);
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    Combine(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
  }
  // Warp 0 combines the per-warp results and publishes the row's (max, sum) in warp_m/s[0].
  const int warp = threadIdx.x / 32, warps = threads / 32;
  if (threadIdx.x % 32 == 0) warp_m[warp] = m, warp_s[warp] = s;
  __syncthreads();
  if (warp == 0) {
    const int lane = threadIdx.x;
    m = lane < warps ? warp_m[lane] : -FLT_MAX;
    s = lane < warps ? warp_s[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2) {
      Combine(m, s, __shfl_xor_sync(0xffffffffu, m, offset),
              __shfl_xor_sync(0xffffffffu, s, offset));
    }
    __syncwarp();
    if (lane == 0) warp_m[0] = m, warp_s[0] = s;
  }
  __syncthreads();
  m = warp_m[0], s = warp_s[0];
  const float lse = m + logf(s);

  const bool ignored = label == ignore_index;
  const int32_t count = *num_valid;
  const float scale = ignored || count == 0 ? 0.0f : 1.0f / static_cast<float>(count);
  if (threadIdx.x == 0) {
    row_loss[row] = ignored ? 0.0f : (label_ok ? lse - label_logit : __int_as_float(0x7fc00000));
    if (lse_out != nullptr) lse_out[row] = lse;
  }
  for (int t = 0; t < tiles; ++t) {
#pragma unroll
    for (int v = 0; v < kCeVecs; ++v) {
      const int c = t * tile + (v * threads + threadIdx.x) * kVecElems;
      if (c >= vocab) continue;
      if (tiles > 1) cache[v] = *reinterpret_cast<const uint4*>(x + c);
      float f[kVecElems];
      Unpack(cache[v], f);
#pragma unroll
      for (int i = 0; i < kVecElems; ++i) {
        f[i] = (__expf(f[i] - lse) - (c + i == label ? 1.0f : 0.0f)) * scale;
      }
      StoreBf16x8(x + c, f);
    }
  }
}

__global__ void __launch_bounds__(kMaxThreads)
    CountValidLabelsKernel(const int64_t* labels, int64_t rows, int64_t ignore_index,
                           int32_t* num_valid) {
  __shared__ int32_t counts[kMaxThreads];
  int32_t count = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) count += labels[r] != ignore_index;
  counts[threadIdx.x] = count;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) counts[threadIdx.x] += counts[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) *num_valid = counts[0];
}

// A fixed partition and tree: the same inputs always give the same loss bits.
__global__ void __launch_bounds__(kMaxThreads)
    MeanRowLossKernel(const float* row_loss, int64_t rows, const int32_t* num_valid, float* loss) {
  __shared__ double sums[kMaxThreads];
  double sum = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) sum += row_loss[r];
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const int32_t count = *num_valid;
    *loss = count == 0 ? 0.0f : static_cast<float>(sums[0] / count);
  }
}

constexpr size_t AlignUp(size_t n) { return (n + 255) / 256 * 256; }

}  // namespace

cudaError_t CountValidLabels(const int64_t* labels, int64_t rows, int64_t ignore_index,
                             int32_t* num_valid, cudaStream_t stream) {
  CountValidLabelsKernel<<<1, kMaxThreads, 0, stream>>>(labels, rows, ignore_index, num_valid);
  return cudaGetLastError();
}

cudaError_t CrossEntropyRows(__nv_bfloat16* logits, int64_t stride, const int64_t* labels,
                             int64_t rows, int vocab, int64_t ignore_index,
                             const int32_t* num_valid, float* row_loss, float* lse,
                             cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  // Enough threads for kCeVecs vectors each over the row, capped at one 1024-thread block.
  const int vecs = (vocab + kVecElems - 1) / kVecElems;
  int threads = 32;
  while (threads < kMaxThreads && threads * kCeVecs < vecs) threads *= 2;
  CrossEntropyRowsKernel<<<static_cast<unsigned>(rows), threads, 0, stream>>>(
      logits, stride, labels, vocab, ignore_index, num_valid, row_loss, lse);
  return cudaGetLastError();
}

cudaError_t MeanRowLoss(const float* row_loss, int64_t rows, const int32_t* num_valid,
                        float* loss, cudaStream_t stream) {
  MeanRowLossKernel<<<1, kMaxThreads, 0, stream>>>(row_loss, rows, num_valid, loss);
  return cudaGetLastError();
}

size_t CrossEntropyWorkspaceBytes(int64_t rows) {
  return AlignUp(static_cast<size_t>(rows) * sizeof(float)) + 256;
}

cudaError_t CrossEntropyForwardBackward(const CrossEntropyParams& params, cudaStream_t stream) {
  CrossEntropyParams p = params;
  if (p.logits_stride == 0) p.logits_stride = p.vocab;
  if (p.logits == nullptr || p.labels == nullptr || p.loss == nullptr || p.workspace == nullptr ||
      p.rows < 0 || p.vocab <= 0 || p.vocab % kVecElems != 0 ||
      p.logits_stride % kVecElems != 0 || !IsAligned16(p.logits) || !IsAligned16(p.workspace) ||
      p.rows > 0x7fffffff) {
    return cudaErrorInvalidValue;
  }
  float* row_loss = static_cast<float*>(p.workspace);
  int32_t* num_valid = reinterpret_cast<int32_t*>(static_cast<char*>(p.workspace) +
                                                  AlignUp(p.rows * sizeof(float)));
  if (cudaError_t err = CountValidLabels(p.labels, p.rows, p.ignore_index, num_valid, stream)) {
    return err;
  }
  if (cudaError_t err = CrossEntropyRows(p.logits, p.logits_stride, p.labels, p.rows, p.vocab,
                                         p.ignore_index, num_valid, row_loss, p.lse, stream)) {
    return err;
  }
  return MeanRowLoss(row_loss, p.rows, num_valid, p.loss, stream);
}

}  // namespace flame::kernels
