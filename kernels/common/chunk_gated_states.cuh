// The per-chunk states of chunk_gla (the per-channel gate), in two parallel steps. Device code;
// included through chunk_gated.cuh. (chunk_simple_gla's per-head gate takes one sequential pass
// per state tile instead: chunk_gated_head_state_pass.cuh.)
//
// The gates are diagonal, so the state recurrence h_{c+1} = diag(2^G_last_c) h_c + U_c is
// elementwise over the K x V state once every chunk's own contribution U_c is known:
//   ChunkUpdateKernel  grid (chunks x K/64, H), one block per 64-row K slice of one chunk's state;
//                      tensor-core products with fp32 accumulation:
//                        U_c = (K_c 2^(G_last - G))^T V_c          (forward: the states)
//                        W_c = scale (Q_c 2^G)^T dO_c              (backward: state gradients)
//                      stored in bf16 in the chunk's state slot, and G_last (log2) per key channel
//                      in `decays`.
//   StateScanKernel    grid (K V / 2048, H, N): each thread carries 8 adjacent entries of one state
//                      row in fp32 through the sequence's chunks, replacing chunk c's slot by the
//                      value entering it: the state entering chunk c (forward), or, walking the
//                      chunks in reverse, the gradient of the state leaving chunk c, with
//                      dh_{c-1} = diag(2^G_last_c) dh_c + W_c.
// The price is two more passes over a [chunks, H, K, V] tensor than a sequential pass and one bf16
// rounding of each chunk's U (or W) before it is summed in fp32. The head gate's pass scales its
// right-hand operand's fragments by one factor per token; the channel gate's decay differs per
// key channel and token, so a pass would need each chunk's decayed k (or q) tile written by a
// block-wide step and a barrier before its product -- not tried yet.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/chunk_gated_params.h"
#include "kernels/common/chunk_gated_tiles.cuh"
#include "kernels/common/mma_tile.cuh"

namespace flame::kernels::gated_chunk {

// Offset of chunk `global`'s decay entry for key channel `row` in the decays buffer:
// [chunks, H, K] fp32.
__device__ inline int64_t DecayOffset(const ChunkGatedParams& p, int global, int h, int row) {
  return (int64_t{global} * p.heads + h) * p.k_dim + row;
}

inline size_t DecaysBytes(const ChunkGatedParams& p, int chunks) {
  return static_cast<size_t>(chunks) * p.heads * p.k_dim * sizeof(float);
}

// ChunkUpdateKernel's shared memory (dynamic): the gate cumsum, then per product the token-major
// operand (k or q, 64 rows x 64 key channels, decayed in place) and the V/64 right-hand tiles
// (v or d_o), which then take the bf16 results. A block computes its K slice's 64 x V rows of U
// (and W), so the chunk's v (and d_o) tiles are read once per K slice.
constexpr size_t kUpdateGateBytes = kBT * kLdF32 * sizeof(float);

inline size_t UpdateSmemBytes(bool backward, int v_dim) {
  return kUpdateGateBytes +
         static_cast<size_t>(backward ? 2 : 1) * (1 + v_dim / kBK) * kTileElems * sizeof(bf16);
}  // K = V = 128: forward 45 KB, backward 72 KB

// Forward: states[c] = U_c. Backward: states[c] = U_c and d_states[c] = W_c (the backward
// recomputes the states beside their gradients, reading the chunk's gate once). One block per
// (chunk, head, 64-row K slice); every copy is issued up front, so a block waits on memory once.
template <bool kBackward>
__global__ void __launch_bounds__(kThreads) ChunkUpdateKernel(ChunkGatedParams p, bf16* states,
                                                              bf16* d_states, float* decays) {
  constexpr Gate kGate = Gate::kChannel;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  constexpr int kProducts = kBackward ? 2 : 1;
  float* G = reinterpret_cast<float*>(smem_raw);
  bf16* tiles = reinterpret_cast<bf16*>(smem_raw + kUpdateGateBytes);
  const int vs = p.v_dim / kBK;
  // Product i: a at tiles + i (1 + vs) tiles, its V slice j right after a.
  auto a_tile = [&](int i) { return tiles + i * (1 + vs) * kTileElems; };
  auto b_tile = [&](int i, int j) { return a_tile(i) + (1 + j) * kTileElems; };
  const Chunk c = LocateChunk(p, BlockChunk(p.heads, p.k_dim / kBK));
  const int h = BlockHead(p.heads, p.k_dim / kBK), k0 = BlockSlice(p.k_dim / kBK) * kBK;
  const bf16* a_src[2] = {p.k, p.q};
  const bf16* b_src[2] = {p.v, p.d_o};
  bf16* dst[2] = {states, d_states};

#pragma unroll
  for (int i = 0; i < kProducts; ++i) {
    AsyncRows(a_tile(i), a_src[i], p.qk_strides, c, h, k0);
    for (int j = 0; j < vs; ++j) AsyncRows(b_tile(i, j), b_src[i], p.v_strides, c, h, j * kBK);
  }
  __pipeline_commit();
  // The gate after the copies: fetched before them (as ChannelGradQKKernel does, to overlap its
  // loads with the copies' address arithmetic) this kernel measured ~1% slower on the H200.
  LoadGate<kGate>(G, p, c, h, k0);  // overlaps the copies; synchronises
  if (threadIdx.x < kBK) {
    decays[DecayOffset(p, c.global, h, k0 + threadIdx.x)] = GateAt<kGate>(G, kBT - 1, threadIdx.x);
  }
  __pipeline_wait_prior(0);
  __syncthreads();
  // The operands decayed in place, two adjacent key channels per lane.
  ForRowPairs<kBT>([&](int, int r, int col) {
    const float2 g = LoadPair(G, r, col), g_last = LoadPair(G, kBT - 1, col);
    const float2 kv = LoadPair(a_tile(0), r, col);
    StorePair(a_tile(0), r, col, kv.x * Exp2(g_last.x - g.x), kv.y * Exp2(g_last.y - g.y));
    if constexpr (kBackward) {
      const float2 qv = LoadPair(a_tile(1), r, col);
      StorePair(a_tile(1), r, col, qv.x * p.scale * Exp2(g.x), qv.y * p.scale * Exp2(g.y));
    }
  });
  __syncthreads();
  for (int j = 0; j < vs; ++j) {
    tile::Acc64 acc[kProducts];
#pragma unroll
    for (int i = 0; i < kProducts; ++i) {
      // A^T B with A(kk, t) = a[t][kk]: the column-major view of the token-major tile.
      acc[i].Zero();
      tile::MmaBf16Acc64<false, true>(acc[i], kBT, a_tile(i), kLdBf16, b_tile(i, j), kLdBf16);
    }
    __syncthreads();  // every warp is done with the V slice's tiles: they take the results
#pragma unroll
    for (int i = 0; i < kProducts; ++i) acc[i].StoreBf16(b_tile(i, j), kLdBf16);
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kProducts; ++i) {
    for (int idx = threadIdx.x; idx < vs * kBK * 8; idx += kThreads) {
      const int j = idx / (kBK * 8), r = idx / 8 % kBK, c8 = idx % 8;
      *reinterpret_cast<uint4*>(dst[i] + StateOffset(p, c.global, h, k0 + r, j * kBK + c8 * 8)) =
          *reinterpret_cast<const uint4*>(b_tile(i, j) + r * kLdBf16 + c8 * 8);
    }
  }
}

constexpr int kScanThreads = kThreads;  // LaunchKernel's block size
constexpr int kScanWidth = 8;   // adjacent state entries per thread: one 16-byte bf16 access
// Chunks whose slots are loaded ahead of the one being updated. (4 left the scan waiting on its
// loads: ncu at (1,8192,96,128), 68% of DRAM bandwidth, long-scoreboard stalls 16 per issue.)
constexpr int kScanAhead = 8;

inline int ScanBlocks(const ChunkGatedParams& p) {
  return p.k_dim * p.v_dim / (kScanWidth * kScanThreads);  // K, V multiples of 64: exact
}

__device__ inline void LoadScanInit(float (&h)[kScanWidth], const float* src, int64_t at) {
#pragma unroll
  for (int e = 0; e < kScanWidth; e += 4) {
    const float4 v = src != nullptr ? *reinterpret_cast<const float4*>(src + at + e)
                                    : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    h[e] = v.x, h[e + 1] = v.y, h[e + 2] = v.z, h[e + 3] = v.w;
  }
}

// kReverse = false: slot[c] <- state entering chunk c, from initial_state; ends in final_state.
// kReverse = true:  slot[c] <- gradient of the state leaving chunk c, from d_final_state, walking
//                   the chunks backwards; ends in d_initial_state.
template <bool kReverse>
__global__ void __launch_bounds__(kScanThreads) StateScanKernel(ChunkGatedParams p, bf16* slots,
                                                                const float* decays) {
  const int h = blockIdx.y, n = blockIdx.z;
  const int entry = (blockIdx.x * kScanThreads + threadIdx.x) * kScanWidth;
  const int row = entry / p.v_dim, col = entry % p.v_dim;
  const Seq seq = LocateSeq<kBT>(p, n);
  const int chunks = seq.num_chunks;
  auto global = [&](int step) { return seq.first_chunk + (kReverse ? chunks - 1 - step : step); };
  auto slot = [&](int step) {
    return reinterpret_cast<uint4*>(slots + StateOffset(p, global(step), h, row, col));
  };
  auto decay = [&](int step) { return decays[DecayOffset(p, global(step), h, row)]; };

  float acc[kScanWidth];
  const int64_t seq_at = StateOffset(p, n, h, row, col);
  LoadScanInit(acc, kReverse ? p.d_final_state : p.initial_state, seq_at);
  uint4 ahead[kScanAhead];
  float ahead_decay[kScanAhead];
#pragma unroll
  for (int i = 0; i < kScanAhead; ++i) {
    if (i < chunks) {
      ahead[i] = *slot(i);
      ahead_decay[i] = decay(i);
    }
  }
  for (int base = 0; base < chunks; base += kScanAhead) {
#pragma unroll
    for (int i = 0; i < kScanAhead; ++i) {
      const int step = base + i;
      if (step < chunks) {
        const uint4 update = ahead[i];
        const float factor = exp2f(ahead_decay[i]);
        if (step + kScanAhead < chunks) {
          ahead[i] = *slot(step + kScanAhead);
          ahead_decay[i] = decay(step + kScanAhead);
        }
        const __nv_bfloat162* u = reinterpret_cast<const __nv_bfloat162*>(&update);
        uint4 out;
        __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
        for (int e = 0; e < kScanWidth / 2; ++e) {
          o[e] = __floats2bfloat162_rn(acc[2 * e], acc[2 * e + 1]);
          const float2 uf = __bfloat1622float2(u[e]);
          acc[2 * e] = factor * acc[2 * e] + uf.x;
          acc[2 * e + 1] = factor * acc[2 * e + 1] + uf.y;
        }
        *slot(step) = out;
      }
    }
  }
  float* last = kReverse ? p.d_initial_state : p.final_state;
  if (last != nullptr) {
#pragma unroll
    for (int e = 0; e < kScanWidth; e += 4) {
      *reinterpret_cast<float4*>(last + seq_at + e) =
          make_float4(acc[e], acc[e + 1], acc[e + 2], acc[e + 3]);
    }
  }
}

}  // namespace flame::kernels::gated_chunk
