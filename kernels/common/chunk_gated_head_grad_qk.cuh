// dq, dk and dg of chunk_simple_gla (the per-head gate; chunk_gla's are in
// chunk_gated_channel.cuh). Device code; included through chunk_gated.cuh.
//
// HeadGradQKKernel: one block per (chunk, head, 64-wide K slice), every operand staged with
// asynchronous copies in two groups (d_o, v, q, k first: the scores' gradient needs only those;
// then the state tiles), products accumulated in registers:
//   dP    = scale tril(dO V^T) 2^(G_i - G_j)                  (recomputed per K slice)
//   dq    = diag(scale 2^G) (dO h_c^T) + dP K
//   dk    = diag(2^(G_last - G)) (V dh_c^T) + dP^T Q            (the first term is dk_inter)
// dg needs sums over every key channel of a row, which the K slices hold between them, so each
// block leaves its slice's sums in `parts` and HeadGateGradKernel (one block per chunk and head)
// adds them up:
//   dg_i = 2^G_last <dh_c, h_c> + sum_{r<i} kdk_r + sum_{r>=i} (q_r.dq_r - k_r.dk_r + kdk_r),
//   kdk_r = k_r . dk_inter_r
// (the per-chunk form of the reverse cumsum; see chunk_gated_channel.cuh.)
// Why not the earlier layout (one block per chunk, synchronous loads before every product, C in
// shared memory): 514 us per call at (4,2048,16,128), waiting on memory with two blocks per SM.
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/chunk_gated_params.h"
#include "kernels/common/chunk_gated_tiles.cuh"
#include "kernels/common/mma_tile.cuh"

namespace flame::kernels::gated_chunk {

// One K slice's dg sums for one (chunk, head): kdk_r (64), q.dq - k.dk per row (64), and
// 2^G_last <dh_c, h_c> over the slice's state rows.
constexpr int kPartKdk = 0;
constexpr int kPartTerms = kBT;
constexpr int kPartState = 2 * kBT;
constexpr int kPartStride = 2 * kBT + 1;

inline size_t GradPartsBytes(const ChunkGatedParams& p, int chunks) {
  return static_cast<size_t>(chunks) * p.heads * (p.k_dim / kBK) * kPartStride * sizeof(float);
}

// Dynamic shared memory: a 1 KB header (G, the two row sums, the state sum), then bf16 tiles:
// d_o and v (V/64 each), q, k, h_c and dh_c (V/64 each), dP.
// K = V = 128: 11 tiles, 102 KB (2 blocks per SM); V = 256: 19 tiles (1 block per SM).
constexpr int kGradHeaderBytes = 1024;
inline size_t HeadGradQKSmemBytes(int v_dim) {
  const size_t tiles = 4 * (v_dim / kBK) + 3;
  return kGradHeaderBytes + tiles * kTileElems * sizeof(bf16);
}

// sums[r] += sum over this lane's elements of f(r, col, i, e), f reading element e of part i of
// Acc64-shaped accumulators, for every row r the lane holds: the quad's lanes reduce by shuffles,
// then one shared atomic per row and quad.
template <typename F>
__device__ inline void AddRowSums(float* sums, F f) {
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = tile::Acc64::ElementRow(i, 2 * half);
      float sum = 0.0f;
#pragma unroll
      for (int n8 = 0; n8 < 2; ++n8) {
#pragma unroll
        for (int b = 0; b < 2; ++b) {  // the elements of this row: x[4 n8 + 2 half + b]
          const int e = 4 * n8 + 2 * half + b;
          sum += f(row, tile::Acc64::ElementCol(e), i, e);
        }
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      if (threadIdx.x % 4 == 0) atomicAdd(&sums[row], sum);
    }
  }
}

__device__ inline void AddBlockSum(float x, float* total) {
  x = WarpSum(x);
  if (threadIdx.x % 32 == 0) atomicAdd(total, x);
}

// kGateGrad: also the dg sums (g given and dg requested; not with g_gamma).
template <bool kGateGrad>
__global__ void __launch_bounds__(kThreads) HeadGradQKKernel(ChunkGatedParams p,
                                                             const bf16* states,
                                                             const bf16* d_states, float* parts) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  float* G = reinterpret_cast<float*>(smem_raw);
  float* kdk_row = G + kBT;
  float* term_row = kdk_row + kBT;
  float* state_sum = term_row + kBT;
  bf16* tiles = reinterpret_cast<bf16*>(smem_raw + kGradHeaderBytes);
  const int vs = p.v_dim / kBK;
  bf16* xo = tiles;                   // d_o, V slice j at j * kTileElems
  bf16* xv = xo + vs * kTileElems;    // v
  bf16* xq = xv + vs * kTileElems;    // q, this K slice
  bf16* xk = xq + kTileElems;         // k
  bf16* hs = xk + kTileElems;         // h_c rows of this K slice, V slice j
  bf16* dhs = hs + vs * kTileElems;   // dh_c
  bf16* dP = dhs + vs * kTileElems;
  const Chunk c = LocateChunk(p, blockIdx.x);
  const int h = blockIdx.y, k0 = blockIdx.z * kBK;

  for (int j = 0; j < vs; ++j) {
    AsyncRows(xo + j * kTileElems, p.d_o, p.v_strides, c, h, j * kBK);
    AsyncRows(xv + j * kTileElems, p.v, p.v_strides, c, h, j * kBK);
  }
  AsyncRows(xq, p.q, p.qk_strides, c, h, k0);
  AsyncRows(xk, p.k, p.qk_strides, c, h, k0);
  __pipeline_commit();
  for (int j = 0; j < vs; ++j) {
    AsyncStateTile(hs + j * kTileElems, states, p, c.global, h, k0, j * kBK);
    AsyncStateTile(dhs + j * kTileElems, d_states, p, c.global, h, k0, j * kBK);
  }
  __pipeline_commit();
  if (threadIdx.x < kBT) kdk_row[threadIdx.x] = term_row[threadIdx.x] = 0.0f;
  if (threadIdx.x == 0) *state_sum = 0.0f;
  LoadHeadGate(G, p, c, h);  // synchronises
  __pipeline_wait_prior(1);
  __syncthreads();

  // dP = scale tril(dO V^T) 2^(G_i - G_j): B(vv, j) = v[j][vv], the column-major view of v.
  const float scale = p.scale;
  tile::Acc64 dq;
  dq.Zero();
  for (int j = 0; j < vs; ++j) {
    tile::MmaBf16Acc64<true, false>(dq, kBK, xo + j * kTileElems, kLdBf16, xv + j * kTileElems,
                                    kLdBf16);
  }
  dq.Transform([&](int r, int col, float x) {
    return col <= r ? x * scale * exp2f(G[r] - G[col]) : 0.0f;
  });
  dq.StoreBf16(dP, kLdBf16);
  __pipeline_wait_prior(0);
  __syncthreads();  // dP and the state tiles are in

  // dq = diag(scale 2^G) dO h_c^T + dP K, with B(vv, kk) = h_c[kk][vv].
  dq.Zero();
  for (int j = 0; j < vs; ++j) {
    tile::MmaBf16Acc64<true, false>(dq, kBK, xo + j * kTileElems, kLdBf16, hs + j * kTileElems,
                                    kLdBf16);
  }
  dq.Transform([&](int r, int, float x) { return x * scale * exp2f(G[r]); });
  tile::MmaBf16Acc64<true, true>(dq, kBT, dP, kLdBf16, xk, kLdBf16);

  // dk = diag(2^(G_last - G)) V dh_c^T + dP^T Q, with A(j, i) = dP[i][j].
  tile::Acc64 dk;
  dk.Zero();
  for (int j = 0; j < vs; ++j) {
    tile::MmaBf16Acc64<true, false>(dk, kBK, xv + j * kTileElems, kLdBf16, dhs + j * kTileElems,
                                    kLdBf16);
  }
  const float g_last = G[kBT - 1];
  dk.Transform([&](int r, int, float x) { return x * exp2f(g_last - G[r]); });
  auto at = [](const bf16* t, int r, int col) { return ToFloat(t[r * kLdBf16 + col]); };
  if constexpr (kGateGrad) {
    AddRowSums(kdk_row, [&](int r, int col, int i, int e) {
      return at(xk, r, col) * dk.part[i].x[e];
    });
  }
  tile::MmaBf16Acc64<false, true>(dk, kBT, dP, kLdBf16, xq, kLdBf16);

  if constexpr (kGateGrad) {
    // Per element, then summed: at strong decays q.dq and k.dk nearly cancel (for a lone diagonal
    // score dq_t = dP_tt k_t, dk_t = dP_tt q_t), and two separate row sums would leave their
    // fp32 rounding as the whole of dg.
    AddRowSums(term_row, [&](int r, int col, int i, int e) {
      return at(xq, r, col) * dq.part[i].x[e] - at(xk, r, col) * dk.part[i].x[e];
    });
    float sum = 0.0f;
    for (int idx = threadIdx.x; idx < kBK * vs * kBK; idx += kThreads) {
      const int j = idx / (kBK * kBK), r = idx / kBK % kBK, col = idx % kBK;
      sum += at(hs + j * kTileElems, r, col) * at(dhs + j * kTileElems, r, col);
    }
    AddBlockSum(sum, state_sum);
  }
  __syncthreads();  // every product is done with the d_o and v tiles: they take the results
  StoreAccRows(dq, xo, p.dq, p.qk_strides, c, h, k0);
  StoreAccRows(dk, xv, p.dk, p.qk_strides, c, h, k0);
  if constexpr (kGateGrad) {
    const int64_t slice = (int64_t{c.global} * p.heads + h) * gridDim.z + blockIdx.z;
    float* part = parts + slice * kPartStride;
    if (threadIdx.x < kBT) {
      part[kPartKdk + threadIdx.x] = kdk_row[threadIdx.x];
      part[kPartTerms + threadIdx.x] = term_row[threadIdx.x];
    }
    if (threadIdx.x == 0) part[kPartState] = *state_sum * exp2f(g_last);
  }
}

// dg of one (chunk, head) from the K slices' sums: 64 threads, one per row. (A template only so
// that the header defines it in each launcher's translation unit without a clash.)
template <Gate kGate>
__global__ void __launch_bounds__(kBT) HeadGateGradKernel(ChunkGatedParams p, const float* parts) {
  static_assert(kGate == Gate::kHead, "the channel gate's dg comes from ChannelGradQKKernel");
  __shared__ float kdk[kBT], terms[kBT];
  const Chunk c = LocateChunk(p, blockIdx.x);
  const int h = blockIdx.y, i = threadIdx.x, slices = p.k_dim / kBK;
  const float* part = parts + (int64_t{c.global} * p.heads + h) * slices * kPartStride;
  float kd = 0.0f, term = 0.0f, state = 0.0f;
  for (int s = 0; s < slices; ++s, part += kPartStride) {
    kd += part[kPartKdk + i];
    term += part[kPartTerms + i];
    state += part[kPartState];
  }
  kdk[i] = kd;
  terms[i] = term;
  __syncthreads();
  if (i >= c.rows) return;
  float acc = state;
  for (int r = 0; r < i; ++r) acc += kdk[r];
  for (int r = i; r < kBT; ++r) acc += terms[r] + kdk[r];
  *RowPtr(p.dg, p.g_strides, c.batch, c.t0 + i, h) = acc;
}

}  // namespace flame::kernels::gated_chunk
