// The per-chunk states by one sequential pass per state tile: chunk_simple_gla's (the per-head
// gate), and chunk_gla's (the per-channel gate) from decayed operands written first. Device code;
// included through chunk_gated.cuh. (chunk_gla can also take the two parallel steps of
// chunk_gated_states.cuh.)
//
// A block carries one tile of one head's state -- key rows [k0, k0 + 64 kNk), value columns
// [v0, v0 + 64) -- through one sequence's chunks in fp32 registers (kNk Acc64), storing it in
// bf16 at every chunk:
//   forward pass:  slot[c] = h_c, the state entering chunk c;
//                  h_{c+1} = 2^Gl h_c + K_c^T (V_c * 2^(Gl - G))
//   reverse pass:  slot[c] = dh_c, the gradient of the state leaving chunk c, walking the chunks
//                  backwards;  dh_{c-1} = 2^Gl dh_c + Q_c^T (dO_c * scale 2^G)
// (G the chunk-local log2 cumsum of the gate, Gl its last row.) A head gate is one scalar per
// token, so the decay inside the product is a factor per row of the right-hand side, applied to
// its mma fragments as they are loaded -- once for all kNk key slices: no decayed copy, no barrier
// for it. Each warp scans the chunk's 64 gates itself (two per lane, shuffles), so a chunk costs
// one barrier: the one that hands its copied stage to the warps and frees the stage before it.
// The tiles stream through kPassStages stages of cp.async copies, issued kPassStages - 1 chunks
// ahead. A backward that recomputes the states launches both passes in one grid (the states and
// their gradients), so twice as many blocks share the machine; one given the forward's states
// (ChunkGatedParams::chunk_states) runs the reverse pass alone.
//
// The per-channel gate's decay differs per key row and token, so it cannot ride on the
// right-hand fragments: for every chunk at once, the decayed keys K 2^(Gl - G) (and, backward,
// the queries Q scale 2^G) and each chunk's Gl per key channel are written first (forward by
// ChannelScoresKernel beside its scores, backward by ChunkDecayKernel); the pass then multiplies
// those unscaled and decays its state rows by 2^Gl of their channel.
//
// Why this and not each chunk's update in parallel and then a scan over the chunks (the channel
// gate's way, and this family's until now): that writes and reads every chunk's update once more
// (rounded to bf16 before it is summed) -- two more passes over a [chunks, H, K, V] tensor. On the
// H200 at (1,8192,96,128) the forward's update + scan took 320 + 232 us, the backward's 595 +
// 2 x 232; this pass's forward 420 us as first written, its calls 559 us on average (forward and
// backward), 518 us once the copies' per-thread addresses were formed once (TileCopy) instead of
// per chunk (the forward alone 420 -> 389 us). ncu on the first version: L2 75% busy, DRAM 41%,
// the warps mostly stalled on short-scoreboard waits (shuffles, shared loads); on the second: 139
// instead of 198 M warp instructions, L2 82% busy, DRAM 44% -- so now the L2 traffic (the state
// stores in 4-byte pieces, each k or v tile read by two blocks) is what to cut. The states now
// go out in 16-byte stores (Acc64::StoreBf16Global16B: a quad of lanes trades its pairs first),
// whole 32-byte sectors per store instruction instead of halves.
// kNk = 2 (128 key rows per block, two blocks per SM) halves the fragment scaling and the value
// tile reads per state element but takes ~1.3x as long per block as kNk = 1 (64 rows, three
// blocks per SM); the launcher (PickPassKeySlices) takes it where it saves waves of blocks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/chunk_gated_channel.cuh"
#include "kernels/common/chunk_gated_params.h"
#include "kernels/common/chunk_gated_states.cuh"
#include "kernels/common/chunk_gated_tiles.cuh"
#include "kernels/common/mma_tile.cuh"

namespace flame::kernels::gated_chunk {

constexpr int kPassStages = 4;

// One stage: the left operand (k forward, q reverse -- the channel gate's decayed copies --:
// kNk 64-column slices of the block's key rows) and the right-hand side (v forward, d_o reverse:
// the block's 64 value columns) of a chunk, token-major bf16 tiles, and its gates (head gate: g
// per token, unused with g_gamma; channel gate: Gl per key row of the block).
template <Gate kGate, int kNk>
struct PassStage {
  bf16 lhs[kNk][kTileElems];
  bf16 rhs[kTileElems];
  float g[kGate == Gate::kChannel ? kNk * kBK : kBT];
};
static_assert(sizeof(PassStage<Gate::kHead, 1>) % 16 == 0, "stages keep the tiles aligned");
static_assert(sizeof(PassStage<Gate::kChannel, 2>) % 16 == 0, "stages keep the tiles aligned");

// kNk = 1: 74,752 bytes, three blocks per SM; kNk = 2: 111,616 bytes (channel gate 112,640), two.
template <Gate kGate, int kNk>
constexpr size_t kStatePassSmemBytes = kPassStages * sizeof(PassStage<kGate, kNk>);

// The channel gate's pass operands, written by ChannelScoresKernel (forward) or ChunkDecayKernel
// (backward): the decayed keys (forward pass) and queries (reverse pass), [chunks, H, 64, K] bf16
// (DecayedOffset), and Gl per chunk and key channel (DecayOffset). Null for the head gate.
struct DecayedOperands {
  const bf16* keys = nullptr;
  const bf16* queries = nullptr;
  const float* decays = nullptr;
};

// The backward's pass operands, per (chunk, 64-wide K slice, head): K 2^(Gl - G) into `keys`,
// Q scale 2^G into `queries`, and Gl into `decays` -- what the channel gate's StatePassKernel
// multiplies. (The forward's come from ChannelScoresKernel, which holds those tiles anyway.)
// Rows past the chunk's end are zero (their k and q tiles are zero-filled). (A template only so
// that the header defines it in each launcher's translation unit without a clash.)
template <Gate kGate>
__global__ void __launch_bounds__(kThreads) ChunkDecayKernel(ChunkGatedParams p, bf16* keys,
                                                             bf16* queries, float* decays) {
  static_assert(kGate == Gate::kChannel, "the head gate's pass needs no decayed operands");
  __shared__ __align__(128) float G[kBT * kLdF32];
  __shared__ __align__(128) bf16 k_tile[kTileElems];
  __shared__ __align__(128) bf16 q_tile[kTileElems];
  const int ks = p.k_dim / kBK;
  const Chunk c = LocateChunk(p, BlockChunk(ks));
  const int h = blockIdx.y, k0 = BlockSlice(ks) * kBK;
  AsyncRows(k_tile, p.k, p.qk_strides, c, h, k0);
  AsyncRows(q_tile, p.q, p.qk_strides, c, h, k0);
  __pipeline_commit();
  LoadChannelGate(G, p, c, h, k0);  // overlaps the copies; synchronises
  __pipeline_wait_prior(0);
  __syncthreads();
  if (threadIdx.x < kBK) {
    decays[DecayOffset(p, c.global, h, k0 + threadIdx.x)] = G[(kBT - 1) * kLdF32 + threadIdx.x];
  }
  StoreDecayedSlice<true>(keys, p, c, h, k0, k_tile, G);
  StoreDecayedSlice<false>(queries, p, c, h, k0, q_tile, G);
}

// bf16 pair x (low half first) times (f.x, f.y), rounded to bf16.
__device__ inline uint32_t ScaleBf16Pair(uint32_t x, float2 f) {
  const __nv_bfloat162 r = __floats2bfloat162_rn(__uint_as_float(x << 16) * f.x,
                                                 __uint_as_float(x & 0xffff0000u) * f.y);
  return *reinterpret_cast<const uint32_t*>(&r);
}

// The passes one StatePassKernel grid runs: `count` of them from `first` (pass 0 the forward
// pass, 1 the reverse pass): the forward {0, 1}; the backward {0, 2}, recomputing the states
// beside their gradients, or {1, 1} where the forward's states were kept.
struct PassSet {
  int first = 0;
  int count = 1;
};

// Grid: (K / (64 kNk) x V / 64 tiles, H, N sequences x passes.count), blockIdx.z = n count + r
// running pass first + r. The forward pass starts from initial_state and ends in final_state
// (skipped where null), the reverse pass starts from d_final_state and ends in d_initial_state.
// (The channel gate's operands are in `decayed`.)
template <Gate kGate, int kNk>
__global__ void __launch_bounds__(kThreads, kNk == 1 ? 3 : 2)
    StatePassKernel(ChunkGatedParams p, PassSet passes, bf16* states, bf16* d_states,
                    DecayedOperands decayed) {
  constexpr bool kChannel = kGate == Gate::kChannel;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  PassStage<kGate, kNk>* stages = reinterpret_cast<PassStage<kGate, kNk>*>(smem_raw);
  const int n = blockIdx.z / passes.count, h = blockIdx.y;
  const bool reverse = passes.first + static_cast<int>(blockIdx.z) % passes.count == 1;
  const int v_tiles = p.v_dim / kBK;
  const int k0 = blockIdx.x / v_tiles * kNk * kBK, v0 = blockIdx.x % v_tiles * kBK;
  const Seq seq = LocateSeq<kBT>(p, n);
  const int chunks = seq.num_chunks;
  const auto chunk_at = [&](int step) {
    return MakeChunk(n, seq, reverse ? chunks - 1 - step : step);
  };
  const bf16* lhs_src =
      kChannel ? (reverse ? decayed.queries : decayed.keys) : (reverse ? p.q : p.k);
  const bf16* rhs_src = reverse ? p.d_o : p.v;
  // Every address's per-thread part is formed once; a chunk adds its own base. (The channel
  // gate's decayed operands are [chunks, H, 64, K]: rows K apart.)
  TensorStrides decayed_rows;
  decayed_rows.token = p.k_dim;
  const TileCopy lhs_copy(kChannel ? decayed_rows : p.qk_strides), rhs_copy(p.v_strides);
  const int gate_row = threadIdx.x;  // threads [0, 64) copy a gate each
  const int64_t gate_offset = gate_row * p.g_strides.token;
  const int64_t chunk_states = int64_t{p.heads} * p.k_dim * p.v_dim;
  bf16* const tile_slots =
      (reverse ? d_states : states) + (int64_t{h} * p.k_dim + k0) * p.v_dim + v0;

  const auto issue = [&](int step) {
    if (step < chunks) {
      PassStage<kGate, kNk>& s = stages[step % kPassStages];
      const Chunk c = chunk_at(step);
      const bf16* lhs_rows = kChannel ? lhs_src + DecayedOffset(p, c.global, h, 0) + k0
                                      : ChunkRows(lhs_src, p.qk_strides, c, h, k0);
#pragma unroll
      for (int i = 0; i < kNk; ++i) lhs_copy.Issue(s.lhs[i], lhs_rows + i * kBK, c.rows);
      rhs_copy.Issue(s.rhs, ChunkRows(rhs_src, p.v_strides, c, h, v0), c.rows);
      if constexpr (kChannel) {  // Gl of the block's key rows, four per thread
        if (threadIdx.x < kNk * kBK / 4) {
          __pipeline_memcpy_async(
              &s.g[4 * threadIdx.x],
              decayed.decays + DecayOffset(p, c.global, h, k0) + 4 * threadIdx.x, 16);
        }
      } else if (p.g != nullptr && gate_row < kBT) {
        const bool valid = gate_row < c.rows;
        const float* gates = RowPtr(p.g, p.g_strides, c.batch, c.t0, h);
        __pipeline_memcpy_async(&s.g[gate_row], valid ? gates + gate_offset : gates,
                                sizeof(float), valid ? 0 : sizeof(float));
      }
    }
    __pipeline_commit();  // one group per step, empty past the end: the waits count steps
  };
  for (int step = 0; step < kPassStages - 1; ++step) issue(step);

  tile::Acc64 acc[kNk];
  const float* first = reverse ? p.d_final_state : p.initial_state;
#pragma unroll
  for (int i = 0; i < kNk; ++i) {
    acc[i].Transform([&](int r, int col, float) {
      return first != nullptr ? first[StateOffset(p, n, h, k0 + i * kBK + r, v0 + col)] : 0.0f;
    });
  }
  const int lane = threadIdx.x % 32, t = lane % 4;
  const float gamma = p.g_gamma != nullptr ? p.g_gamma[h] : 0.0f;

  for (int step = 0; step < chunks; ++step) {
    const Chunk c = chunk_at(step);
    bf16* const slot = tile_slots + c.global * chunk_states;
#pragma unroll
    for (int i = 0; i < kNk; ++i) acc[i].StoreBf16Global16B(slot + i * kBK * p.v_dim, p.v_dim);
    __pipeline_wait_prior(kPassStages - 2);
    __syncthreads();  // this step's stage is in; every warp is done with the previous stage
    issue(step + kPassStages - 1);
    const PassStage<kGate, kNk>& s = stages[step % kPassStages];
    if constexpr (kChannel) {
      // Each state row decays by 2^Gl of its key channel; then acc += lhs^T rhs, both unscaled.
#pragma unroll
      for (int i = 0; i < kNk; ++i) {
#pragma unroll
        for (int part = 0; part < 2; ++part) {
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const float f = Exp2(s.g[i * kBK + tile::Acc64::ElementRow(part, 2 * half)]);
#pragma unroll
            for (int e = 2 * half; e < 8; e += 4) {
              acc[i].part[part].x[e] *= f;
              acc[i].part[part].x[e + 1] *= f;
            }
          }
        }
      }
      tile::MmaBf16Acc64<false, true, kNk>(acc, kBT, s.lhs[0], kLdBf16, kTileElems, s.rhs,
                                           kLdBf16, [](uint32_t(&)[4], int) {});
    } else {
      // The chunk's gates, tokens 2 lane and 2 lane + 1, scanned across the warp (padded rows
      // add 0, so the last lane's sum is the chunk's total).
      float2 g = make_float2(0.0f, 0.0f);
      if (p.g != nullptr) {
        g = *reinterpret_cast<const float2*>(&s.g[2 * lane]);
      } else {
        g.x = 2 * lane < c.rows ? gamma : 0.0f;
        g.y = 2 * lane + 1 < c.rows ? gamma : 0.0f;
      }
      float sum = g.x + g.y;
#pragma unroll
      for (int off = 1; off < 32; off *= 2) {
        const float y = __shfl_up_sync(0xffffffffu, sum, off);
        if (lane >= off) sum += y;
      }
      const float g1 = sum * kRcpLn2, g0 = (sum - g.y) * kRcpLn2;
      const float g_last = __shfl_sync(0xffffffffu, sum, 31) * kRcpLn2;
      // This lane's tokens' factors: 2^(Gl - G) forward, scale 2^G reverse (exponents <= 0).
      const float2 own = reverse ? make_float2(p.scale * exp2f(g0), p.scale * exp2f(g1))
                                 : make_float2(exp2f(g_last - g0), exp2f(g_last - g1));

      const float decay = exp2f(g_last);
#pragma unroll
      for (int i = 0; i < kNk; ++i) acc[i].Scale(decay);
      // acc += lhs^T (rhs * f), every key slice against the same scaled right-hand fragments:
      // rhs's fragment at k offset l holds rows l + 2t, l + 2t + 1 (b0) and those + 8 (b1), i.e.
      // the token pairs l / 2 + t and l / 2 + t + 4.
      const auto scale_rows = [&](uint32_t (&fb)[4], int l) {
        const int pair = l / 2 + t;
        const float2 lo = make_float2(__shfl_sync(0xffffffffu, own.x, pair),
                                      __shfl_sync(0xffffffffu, own.y, pair));
        const float2 hi = make_float2(__shfl_sync(0xffffffffu, own.x, pair + 4),
                                      __shfl_sync(0xffffffffu, own.y, pair + 4));
        fb[0] = ScaleBf16Pair(fb[0], lo);
        fb[2] = ScaleBf16Pair(fb[2], lo);
        fb[1] = ScaleBf16Pair(fb[1], hi);
        fb[3] = ScaleBf16Pair(fb[3], hi);
      };
      tile::MmaBf16Acc64<false, true, kNk>(acc, kBT, s.lhs[0], kLdBf16, kTileElems, s.rhs,
                                           kLdBf16, scale_rows);
    }
  }

  float* last = reverse ? p.d_initial_state : p.final_state;
  if (last != nullptr) {
#pragma unroll
    for (int i = 0; i < kNk; ++i) {
      float* const tile = last + StateOffset(p, n, h, k0 + i * kBK, v0);
      acc[i].ForEachPairAt(p.v_dim, [&](int at, float x0, float x1) {
        *reinterpret_cast<float2*>(tile + at) = make_float2(x0, x1);
      });
    }
  }
}

}  // namespace flame::kernels::gated_chunk
