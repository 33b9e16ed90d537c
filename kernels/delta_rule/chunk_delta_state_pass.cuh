// The sequential state passes of the chunked delta rule (formulas in chunk_delta_steps.h), one
// block per (V slice of 32, head, sequence), the K x 32 state slice on chip in fp32. Slices of 32
// rather than 64 give twice the blocks, which the passes need: a (4, 2048, 16, 128) batch has only
// 4 x 16 sequence-heads to spread over 132 multiprocessors.
//
// The passes are latency-bound: per chunk they read a few 64 x 64 tiles and multiply them with
// the state, and every chunk waits for the one before. So each pass consumes its chunk tiles as
// one stream, in the order the arithmetic needs them, through a ring of shared-memory slots
// filled by asynchronous copies (cp.async) as many tiles ahead as the ring has slots, less one: the next tiles, also the
// next chunk's, are in flight while the current one is multiplied. Row scalings that the tiles
// would need on the way in are moved onto the products instead (diag(d) K^T x = K^T (diag(d) x)),
// so that the tiles are raw copies.
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/delta_rule/chunk_delta_tiles.cuh"

namespace flame::kernels::delta_chunk::tiles {

// Ring slots: the backward keeps more tiles besides, and takes one slot fewer so that two of its
// blocks fit on a multiprocessor at K = 128 (as two forward blocks do).
constexpr int kForwardRing = 4;
constexpr int kBackwardRing = 3;
constexpr int kBV = 32;            // V columns per block
constexpr int kLdV = kBV + 4;      // leading dimension of the 32-wide tiles (same bank pattern)
constexpr int kTileV = kBT * kLdV;
static_assert(kLd == kBT + 4 && kLdV == kBV + 4, "LoadState / StoreState / ScaleRows<width> pad rows by 4");

// C (64 x 32, leading dimension kLdV) (+)= A B, A a 64 x 64 tile (leading dimension kLd, or its
// transpose with kAT), B 64 x 32 (leading dimension kLdV).
template <bool kAT>
__device__ __forceinline__ void MmaV(float* c, const float* a, const float* b, bool accumulate) {
  tile::MmaTf32Tile64x32<!kAT, true>(kBT, a, kLd, b, kLdV, c, kLdV, accumulate);
}

// ----------------------------------------------------------------------------------------------
// Asynchronous tile copies into a ring slot; rows past the chunk's end are zero-filled.

// kWidth columns from col0 into rows of leading dimension kWidth + 4.
template <int kWidth = kBT>
__device__ inline void IssueTok(float* slot, const float* src, const ChunkDeltaParams& p,
                                const Chunk& c, int h, int dim, int col0) {
  for (int idx = threadIdx.x; idx < kBT * (kWidth / 4); idx += kThreads) {
    const int r = idx / (kWidth / 4), c4 = idx % (kWidth / 4);
    const bool valid = r < c.rows;
    __pipeline_memcpy_async(slot + r * (kWidth + 4) + c4 * 4,
                            TokPtr(src, p, c, valid ? r : 0, h, dim) + col0 + c4 * 4, 16,
                            valid ? 0 : 16);
  }
}

__device__ inline void IssueMat(float* slot, const float* src) {
  for (int idx = threadIdx.x; idx < kBT * 16; idx += kThreads) {
    const int r = idx / 16, c4 = idx % 16;
    __pipeline_memcpy_async(slot + r * kLd + c4 * 4, src + r * kBT + c4 * 4, 16);
  }
}

// 32 columns of a bf16 [B,T,H,D] tensor, stored densely (32 bf16 per row) in the slot.
__device__ inline void IssueInV(float* slot, const __nv_bfloat16* src, const TensorStrides& st,
                                const Chunk& c, int h, int col0) {
  auto* dst = reinterpret_cast<__nv_bfloat16*>(slot);
  for (int idx = threadIdx.x; idx < kBT * (kBV / 8); idx += kThreads) {
    const int r = idx / (kBV / 8), c8 = idx % (kBV / 8);
    const bool valid = r < c.rows;
    __pipeline_memcpy_async(dst + r * kBV + c8 * 8,
                            src + In(st, c.batch, c.t0 + (valid ? r : 0), h) + col0 + c8 * 8, 16,
                            valid ? 0 : 16);
  }
}

// The ring: item g of the stream lives in slot g % kSlots. Wait(g) first issues item
// g + kSlots - 1 (through `issue`, which commits nothing), so every thread commits exactly one
// copy group per item, then waits for item g's group and synchronises the block. Callers end
// each item's work with a block barrier, so that the slot Wait(g + 1) refills is free.
template <int kSlots, typename Issue>
struct TileRing {
  float* slots;
  int items;
  Issue issue;

  __device__ void Start() {
    for (int g = 0; g < kSlots - 1; ++g) Fill(g);
  }
  __device__ const float* Wait(int g) {
    Fill(g + kSlots - 1);
    __pipeline_wait_prior(kSlots - 1);
    __syncthreads();
    return slots + (g % kSlots) * kTile;
  }
  __device__ void Fill(int g) {
    if (g < items) issue(g, slots + (g % kSlots) * kTile);
    __pipeline_commit();
  }
};

template <int kSlots, typename Issue>
__device__ TileRing<kSlots, Issue> MakeRing(float* slots, int items, Issue issue) {
  return TileRing<kSlots, Issue>{slots, items, issue};
}

// ----------------------------------------------------------------------------------------------
// Forward: per chunk, in order,
//   S[chunk] = S;  Ut = U - W S;  S = gamma_L S + K^T (diag(exp(G_L - G)) Ut).
// Stream per chunk: W slices (K/64), U, K slices (K/64).
__global__ void __launch_bounds__(kThreads) StateForwardKernel(StepBase b) {
  extern __shared__ float4 smem4[];
  const ChunkDeltaParams& p = b.p;
  const int K = p.k_dim, V = p.v_dim, nk = K / kBT, per_chunk = 2 * nk + 1;
  float* S = reinterpret_cast<float*>(smem4);
  float* acc = S + K * kLdV;  // W S, then the decayed new values
  float* G = acc + kTileV;
  float* ring_slots = G + kBT;
  const int v0 = blockIdx.x * kBV, h = blockIdx.y, n = blockIdx.z;
  const Seq seq = LocateSeq<kBT>(p, n);
  auto ring = MakeRing<kForwardRing>(ring_slots, seq.num_chunks * per_chunk, [&](int g, float* slot) {
    const Chunk c = MakeChunk(p, seq, g / per_chunk);
    const int item = g % per_chunk;
    if (item < nk) {
      IssueTok(slot, b.s.W, p, c, h, K, item * kBT);
    } else if (item == nk) {
      IssueTok<kBV>(slot, b.s.U, p, c, h, V, v0);
    } else {
      IssueTok(slot, b.s.kn, p, c, h, K, (item - nk - 1) * kBT);
    }
  });
  ring.Start();
  LoadState<kBV>(S, p.initial_state ? p.initial_state + State(p, n, h) : nullptr, K, V, v0);
  int g = 0;
  for (int ci = 0; ci < seq.num_chunks; ++ci) {
    const Chunk c = MakeChunk(p, seq, ci);
    __syncthreads();  // S complete, the previous chunk's G read
    LoadRowScalars(G, nullptr, b, c, h);
    StoreState<kBV>(b.s.S + State(p, c.global, h), S, K, V, v0);
    for (int ks = 0; ks < nk; ++ks) {
      const float* w = ring.Wait(g++);
      MmaV<false>(acc, w, S + ks * kBT * kLdV, ks > 0);
      __syncthreads();
    }
    const float* u = ring.Wait(g++);
    const float G_last = G[c.rows - 1];
    float* ut = TokPtr(b.s.Ut, p, c, 0, h, V) + v0;
    for (int e = threadIdx.x; e < kBT * kBV; e += kThreads) {
      const int r = e / kBV, col = e % kBV, x = r * kLdV + col;
      const float val = u[x] - acc[x];
      if (r < c.rows) ut[int64_t{r} * p.heads * V + col] = val;
      acc[x] = val * expf(G_last - G[r]);
    }
    ScaleRows<kBV>(S, K, expf(G_last));
    __syncthreads();
    for (int ks = 0; ks < nk; ++ks) {
      const float* k = ring.Wait(g++);
      MmaV<true>(S + ks * kBT * kLdV, k, acc, true);
      __syncthreads();
    }
  }
  __syncthreads();
  if (p.final_state) StoreState<kBV>(p.final_state + State(p, n, h), S, K, V, v0);
}

inline size_t StateForwardSmem(int k_dim) {
  return (k_dim * kLdV + kTileV + kForwardRing * kTile + kBT) * sizeof(float);
}

// ----------------------------------------------------------------------------------------------
// Backward: per chunk, in reverse, with dS the gradient of the state leaving the chunk,
//   dS[chunk] = dS;  dUt = diag(exp(G_L - G)) K dS + M^T (scale dO);
//   dS = gamma_L dS + Q^T (scale diag(gamma) dO) + W^T (-dUt).
// Stream per chunk: K slices, dO, M, Q slices, W slices.
__global__ void __launch_bounds__(kThreads) StateBackwardKernel(StepBase b) {
  extern __shared__ float4 smem4[];
  const ChunkDeltaParams& p = b.p;
  const int K = p.k_dim, V = p.v_dim, nk = K / kBT, per_chunk = 3 * nk + 2;
  float* dS = reinterpret_cast<float*>(smem4);
  float* dut = dS + K * kLdV;
  float* d_o = dut + kTileV;   // scale dO, then -dUt
  float* d_og = d_o + kTileV;  // scale diag(gamma) dO
  float* G = d_og + kTileV;
  float* ring_slots = G + kBT;
  const int v0 = blockIdx.x * kBV, h = blockIdx.y, n = blockIdx.z;
  const Seq seq = LocateSeq<kBT>(p, n);
  auto ring = MakeRing<kBackwardRing>(ring_slots, seq.num_chunks * per_chunk,
                                      [&](int g, float* slot) {
    const Chunk c = MakeChunk(p, seq, seq.num_chunks - 1 - g / per_chunk);
    const int item = g % per_chunk;
    if (item < nk) {
      IssueTok(slot, b.s.kn, p, c, h, K, item * kBT);
    } else if (item == nk) {
      IssueInV(slot, p.d_o, p.v_strides, c, h, v0);
    } else if (item == nk + 1) {
      IssueMat(slot, b.s.M + Mat(p, c.global, h));
    } else if (item < 2 * nk + 2) {
      IssueTok(slot, b.s.qn, p, c, h, K, (item - nk - 2) * kBT);
    } else {
      IssueTok(slot, b.s.W, p, c, h, K, (item - 2 * nk - 2) * kBT);
    }
  });
  ring.Start();
  LoadState<kBV>(dS, p.d_final_state ? p.d_final_state + State(p, n, h) : nullptr, K, V, v0);
  int g = 0;
  for (int ci = seq.num_chunks - 1; ci >= 0; --ci) {
    const Chunk c = MakeChunk(p, seq, ci);
    __syncthreads();
    LoadRowScalars(G, nullptr, b, c, h);
    StoreState<kBV>(b.s.dS + State(p, c.global, h), dS, K, V, v0);
    for (int ks = 0; ks < nk; ++ks) {
      const float* k = ring.Wait(g++);
      MmaV<false>(dut, k, dS + ks * kBT * kLdV, ks > 0);
      __syncthreads();
    }
    const auto* d_o_in = reinterpret_cast<const __nv_bfloat16*>(ring.Wait(g++));
    const float G_last = G[c.rows - 1];
    for (int e = threadIdx.x; e < kBT * kBV; e += kThreads) {
      const int r = e / kBV, col = e % kBV, x = r * kLdV + col;
      const float scaled = p.scale * __bfloat162float(d_o_in[e]);
      d_o[x] = scaled;
      d_og[x] = scaled * expf(G[r]);
      dut[x] *= expf(G_last - G[r]);
    }
    __syncthreads();
    const float* m = ring.Wait(g++);
    MmaV<true>(dut, m, d_o, true);
    __syncthreads();
    float* dut_out = TokPtr(b.s.dUt, p, c, 0, h, V) + v0;
    for (int e = threadIdx.x; e < kBT * kBV; e += kThreads) {
      const int r = e / kBV, col = e % kBV, x = r * kLdV + col;
      if (r < c.rows) dut_out[int64_t{r} * p.heads * V + col] = dut[x];
      d_o[x] = -dut[x];
    }
    ScaleRows<kBV>(dS, K, expf(G_last));
    __syncthreads();
    for (int ks = 0; ks < nk; ++ks) {
      const float* q = ring.Wait(g++);
      MmaV<true>(dS + ks * kBT * kLdV, q, d_og, true);
      __syncthreads();
    }
    for (int ks = 0; ks < nk; ++ks) {
      const float* w = ring.Wait(g++);
      MmaV<true>(dS + ks * kBT * kLdV, w, d_o, true);
      __syncthreads();
    }
  }
  __syncthreads();
  if (p.d_initial_state) StoreState<kBV>(p.d_initial_state + State(p, n, h), dS, K, V, v0);
}

inline size_t StateBackwardSmem(int k_dim) {
  return (k_dim * kLdV + 3 * kTileV + kBackwardRing * kTile + kBT) * sizeof(float);
}

}  // namespace flame::kernels::delta_chunk::tiles
