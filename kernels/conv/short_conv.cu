// Short convolution kernels. A thread owns 4 channels (one 8-byte vector) and a tile of
// kTileLen consecutive tokens, sliding a window of the last W-1 inputs along time in registers;
// x is read once plus W-1 tokens of history per tile. (This layout reaches only about a third of
// the copy bandwidth on H200: too few bytes in flight per SM. See
// tests/benchmarks/results/small_ops_h200.txt.) Kernels narrower than 4 are run as width 4
// with leading zero taps, so one instantiation serves every W.
#include "kernels/conv/short_conv.h"

#include <cfloat>

#include "kernels/norm/row_ops.cuh"

namespace flame::kernels {
namespace {

constexpr int kW = kMaxShortConvWidth;
constexpr int kChanThreads = 32;  // threadIdx.x: adjacent channel groups, one warp per row read
constexpr int kTiles = 8;         // threadIdx.y: time tiles per block
constexpr int kTileLen = 32;      // tokens per thread
constexpr int kBlockTokens = kTiles * kTileLen;
// Channels per thread (8-byte accesses) and tokens whose loads are issued together: the
// per-channel state (taps, history, dz window, dweight sums) and the loads in flight must fit in
// 128 registers (two blocks per SM) without spilling.
constexpr int kFwdChans = 4;
constexpr int kBwdChans = 4;
constexpr int kFwdGroup = 4;
constexpr int kBwdGroup = 2;

// The sequence holding a token: [start, end), with an id that differs between sequences.
struct Segment {
  int64_t start;
  int64_t end;
  int id;
};

template <typename P>
__device__ Segment SegmentOf(const P& p, int64_t t) {
  if (p.cu_seqlens == nullptr) {
    const int64_t id = t / p.seq_len;
    return {id * p.seq_len, (id + 1) * p.seq_len, static_cast<int>(id)};
  }
  int lo = 0, hi = p.num_seqs;  // largest n with cu_seqlens[n] <= t
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.cu_seqlens[mid] <= t) lo = mid; else hi = mid - 1;
  }
  return {p.cu_seqlens[lo], lo < p.num_seqs ? p.cu_seqlens[lo + 1] : INT64_MAX, lo};
}

template <typename P>
__device__ void NextSegment(const P& p, Segment& s) {
  s.start = s.end;
  ++s.id;
  if (p.cu_seqlens == nullptr) {
    s.end += p.seq_len;
  } else {
    s.end = s.id < p.num_seqs ? p.cu_seqlens[s.id + 1] : INT64_MAX;
  }
}

// Padded taps: w[c][k] multiplies x[t - 3 + k]; taps k < 4 - W are zero.
template <int C, typename P>
__device__ void LoadTaps(const P& p, int d, float (&w)[C][kW], float (&b)[C]) {
  const int pad = kW - p.kernel_size;
#pragma unroll
  for (int c = 0; c < C; ++c) {
#pragma unroll
    for (int k = 0; k < kW; ++k) {
      w[c][k] = k < pad ? 0.0f : __bfloat162float(p.weight[(d + c) * p.kernel_size + k - pad]);
    }
    b[c] = p.bias != nullptr ? __bfloat162float(p.bias[d + c]) : 0.0f;
  }
}

template <int C>
__device__ __forceinline__ void ZeroHistory(float (&xw)[kW - 1][C]) {
#pragma unroll
  for (int j = 0; j < kW - 1; ++j)
#pragma unroll
    for (int c = 0; c < C; ++c) xw[j][c] = 0.0f;
}

// The W-1 inputs before t0 that belong to t0's sequence (zeros elsewhere).
template <int C>
__device__ void LoadHistory(const __nv_bfloat16* x, int64_t stride, int64_t t0, int d,
                            const Segment& s, float (&xw)[kW - 1][C]) {
  ZeroHistory(xw);
#pragma unroll
  for (int j = 0; j < kW - 1; ++j) {
    const int64_t t = t0 - (kW - 1) + j;
    if (t >= s.start && t >= 0) LoadBf16xN<C>(x + t * stride + d, xw[j]);
  }
}

template <int C>
__device__ __forceinline__ void PushHistory(float (&xw)[kW - 1][C], const float (&xt)[C]) {
#pragma unroll
  for (int c = 0; c < C; ++c) xw[0][c] = xw[1][c], xw[1][c] = xw[2][c], xw[2][c] = xt[c];
}

__global__ void __launch_bounds__(kChanThreads* kTiles, 2) ShortConvForwardKernel(ShortConvForwardParams p) {
  constexpr int C = kFwdChans;
  const int d = (blockIdx.y * kChanThreads + threadIdx.x) * C;
  const int64_t t0 = (static_cast<int64_t>(blockIdx.x) * kTiles + threadIdx.y) * kTileLen;
  if (d >= p.dim || t0 >= p.tokens) return;
  const int64_t t1 = t0 + kTileLen < p.tokens ? t0 + kTileLen : p.tokens;
  float w[C][kW], b[C], xw[kW - 1][C];
  LoadTaps<C>(p, d, w, b);
  Segment s = SegmentOf(p, t0);
  LoadHistory<C>(p.x, p.x_stride, t0, d, s, xw);
  // Groups of kFwdGroup tokens: all loads first, so each thread has several in flight.
  for (int64_t tb = t0; tb < t1; tb += kFwdGroup) {
    float xb[kFwdGroup][C];
#pragma unroll
    for (int j = 0; j < kFwdGroup; ++j) {
      if (tb + j < t1) LoadBf16xN<C>(p.x + (tb + j) * p.x_stride + d, xb[j]);
    }
#pragma unroll
    for (int j = 0; j < kFwdGroup; ++j) {
      const int64_t t = tb + j;
      if (t >= t1) break;
      if (t == s.end) {  // a new sequence starts: forget the history
        NextSegment(p, s);
        ZeroHistory(xw);
      }
      float y[C];
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const float z = b[c] + w[c][0] * xw[0][c] + w[c][1] * xw[1][c] + w[c][2] * xw[2][c] +
                        w[c][3] * xb[j][c];
        y[c] = p.silu ? z * Sigmoid(z) : z;
      }
      StoreBf16xN<C>(p.y + t * p.y_stride + d, y);
      PushHistory(xw, xb[j]);
    }
  }
}

// dz[t] = dy[t] * silu'(z[t]);  dx[t] = sum_j w[3 - j] * dz[t + j] over t + j in t's sequence;
// dw[k] += dz[t] * x[t - 3 + k];  dbias += dz[t]. A thread walks its tile plus 3 tokens of
// lookahead (recomputing z there) and finalises dx[t] once dz[t..t+3] are known.
__global__ void __launch_bounds__(kChanThreads* kTiles, 2) ShortConvBackwardKernel(ShortConvBackwardParams p) {
  constexpr int C = kBwdChans;
  __shared__ float red[kTiles][kChanThreads * C + 1];  // 8 x 129 x 4 = 4.1 KB
  const int d = (blockIdx.y * kChanThreads + threadIdx.x) * C;
  const int64_t t0 = (static_cast<int64_t>(blockIdx.x) * kTiles + threadIdx.y) * kTileLen;
  const bool active = d < p.dim && t0 < p.tokens;
  float dw[C][kW] = {}, db[C] = {};

  if (active) {
    const int64_t t1 = t0 + kTileLen < p.tokens ? t0 + kTileLen : p.tokens;
    float w[C][kW], b[C], xw[kW - 1][C];
    LoadTaps<C>(p, d, w, b);
    Segment s = SegmentOf(p, t0);
    LoadHistory<C>(p.x, p.x_stride, t0, d, s, xw);
    float dzw[kW - 1][C] = {};  // dz at pos-3, pos-2, pos-1
    int sidw[kW - 1] = {-1, -1, -1};
    const int64_t t_end = t1 + kW - 1;  // the tile plus kW - 1 tokens of lookahead
    for (int64_t pb = t0; pb < t_end; pb += kBwdGroup) {
      float xb[kBwdGroup][C], dyb[kBwdGroup][C];
#pragma unroll
      for (int j = 0; j < kBwdGroup; ++j) {  // all loads first, several in flight
        const int64_t pos = pb + j;
        if (pos < t_end && pos < p.tokens) {
          LoadBf16xN<C>(p.x + pos * p.x_stride + d, xb[j]);
          LoadBf16xN<C>(p.dy + pos * p.dy_stride + d, dyb[j]);
        }
      }
#pragma unroll
      for (int j = 0; j < kBwdGroup; ++j) {
        const int64_t pos = pb + j;
        if (pos >= t_end) break;
        float dz[C] = {};
        int sid = -2;  // past the end: matches no sequence
        if (pos < p.tokens) {
          if (pos == s.end) {
            NextSegment(p, s);
            ZeroHistory(xw);
          }
          sid = s.id;
#pragma unroll
          for (int c = 0; c < C; ++c) {
            dz[c] = dyb[j][c];
            if (p.silu) {
              const float z = b[c] + w[c][0] * xw[0][c] + w[c][1] * xw[1][c] +
                              w[c][2] * xw[2][c] + w[c][3] * xb[j][c];
              const float sg = Sigmoid(z);
              dz[c] *= sg * (1.0f + z * (1.0f - sg));
            }
            if (pos < t1) {
              db[c] += dz[c];
              dw[c][0] += dz[c] * xw[0][c];
              dw[c][1] += dz[c] * xw[1][c];
              dw[c][2] += dz[c] * xw[2][c];
              dw[c][3] += dz[c] * xb[j][c];
            }
          }
          PushHistory(xw, xb[j]);
        }
        const int64_t t = pos - (kW - 1);
        if (t >= t0) {
          const float m1 = sidw[1] == sidw[0] ? 1.0f : 0.0f;
          const float m2 = sidw[2] == sidw[0] ? 1.0f : 0.0f;
          const float m3 = sid == sidw[0] ? 1.0f : 0.0f;
          float dx[C];
#pragma unroll
          for (int c = 0; c < C; ++c) {
            dx[c] = w[c][3] * dzw[0][c] + m1 * w[c][2] * dzw[1][c] + m2 * w[c][1] * dzw[2][c] +
                    m3 * w[c][0] * dz[c];
          }
          StoreBf16xN<C>(p.dx + t * p.dx_stride + d, dx);
        }
        PushHistory(dzw, dz);
        sidw[0] = sidw[1], sidw[1] = sidw[2], sidw[2] = sid;
      }
    }
  }

  // Sum the block's time tiles and write one partial row: [dweight (D, W) | dbias (D)].
  // Padded tap k is weight column k - (4 - W); k == kW stands for the bias.
  const int pad = kW - p.kernel_size;
  float* partial = p.workspace + static_cast<int64_t>(blockIdx.x) * p.dim * (p.kernel_size + 1);
#pragma unroll
  for (int k = 0; k <= kW; ++k) {
    if (k < pad) continue;  // uniform over the block
#pragma unroll
    for (int c = 0; c < C; ++c) red[threadIdx.y][threadIdx.x * C + c] = k < kW ? dw[c][k] : db[c];
    __syncthreads();
    if (threadIdx.y == 0 && d < p.dim) {
#pragma unroll
      for (int c = 0; c < C; ++c) {
        float sum = 0.0f;
        for (int i = 0; i < kTiles; ++i) sum += red[i][threadIdx.x * C + c];
        if (k < kW) {
          partial[(d + c) * p.kernel_size + k - pad] = sum;
        } else {
          partial[static_cast<int64_t>(p.dim) * p.kernel_size + d + c] = sum;
        }
      }
    }
    __syncthreads();
  }
}

int64_t TimeBlocks(int64_t tokens) { return (tokens + kBlockTokens - 1) / kBlockTokens; }

template <typename P>
bool CommonArgsOk(const P& p) {
  return p.tokens >= 0 && p.dim > 0 && p.dim % kVecElems == 0 && p.kernel_size >= 1 &&
         p.kernel_size <= kW && p.weight != nullptr &&
         (p.cu_seqlens != nullptr ? p.num_seqs > 0 : p.seq_len > 0);
}

bool RowArgOk(const void* ptr, int64_t stride) {
  return ptr != nullptr && IsAligned16(ptr) && stride % kVecElems == 0;
}

dim3 Grid(int64_t tokens, int dim, int chans_per_thread) {
  const int per_block = kChanThreads * chans_per_thread;
  return dim3(static_cast<unsigned>(TimeBlocks(tokens)),
              static_cast<unsigned>((dim + per_block - 1) / per_block));
}

}  // namespace

cudaError_t ShortConvForward(const ShortConvForwardParams& params, cudaStream_t stream) {
  ShortConvForwardParams p = params;
  if (p.x_stride == 0) p.x_stride = p.dim;
  if (p.y_stride == 0) p.y_stride = p.dim;
  if (!CommonArgsOk(p) || !RowArgOk(p.x, p.x_stride) || !RowArgOk(p.y, p.y_stride)) {
    return cudaErrorInvalidValue;
  }
  if (p.tokens == 0) return cudaSuccess;
  ShortConvForwardKernel<<<Grid(p.tokens, p.dim, kFwdChans), dim3(kChanThreads, kTiles), 0, stream>>>(p);
  return cudaGetLastError();
}

size_t ShortConvBackwardWorkspaceBytes(int64_t tokens, int dim, int kernel_size) {
  return static_cast<size_t>(TimeBlocks(tokens)) * dim * (kernel_size + 1) * sizeof(float);
}

cudaError_t ShortConvBackward(const ShortConvBackwardParams& params, cudaStream_t stream) {
  ShortConvBackwardParams p = params;
  if (p.x_stride == 0) p.x_stride = p.dim;
  if (p.dy_stride == 0) p.dy_stride = p.dim;
  if (p.dx_stride == 0) p.dx_stride = p.dim;
  if (!CommonArgsOk(p) || !RowArgOk(p.x, p.x_stride) || !RowArgOk(p.dy, p.dy_stride) ||
      !RowArgOk(p.dx, p.dx_stride) || p.dweight == nullptr || p.workspace == nullptr) {
    return cudaErrorInvalidValue;
  }
  const int64_t cols = static_cast<int64_t>(p.dim) * p.kernel_size;
  if (p.tokens == 0) {
    if (cudaError_t err = cudaMemsetAsync(p.dweight, 0, cols * sizeof(float), stream)) return err;
    return p.dbias ? cudaMemsetAsync(p.dbias, 0, p.dim * sizeof(float), stream) : cudaSuccess;
  }
  ShortConvBackwardKernel<<<Grid(p.tokens, p.dim, kBwdChans), dim3(kChanThreads, kTiles), 0, stream>>>(p);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  const int64_t slots = TimeBlocks(p.tokens);
  const int64_t ld = static_cast<int64_t>(p.dim) * (p.kernel_size + 1);
  if (cudaError_t err = SumPartialRows(p.workspace, slots, cols, ld, p.dweight, stream)) return err;
  if (p.dbias == nullptr) return cudaSuccess;
  return SumPartialRows(p.workspace + cols, slots, p.dim, ld, p.dbias, stream);
}

}  // namespace flame::kernels
