// The per-chunk states of chunk_simple_gla (the per-head gate) by one sequential pass per state
// tile. Device code; included through chunk_gated.cuh. (chunk_gla's per-channel gate still takes
// the two parallel steps of chunk_gated_states.cuh.)
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
// ahead. The backward launches both passes in one grid (the states it recomputes and their
// gradients), so twice as many blocks share the machine.
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

#include "kernels/common/chunk_gated_params.h"
#include "kernels/common/chunk_gated_tiles.cuh"
#include "kernels/common/mma_tile.cuh"

namespace flame::kernels::gated_chunk {

constexpr int kPassStages = 4;

// One stage: the left operand (k forward, q reverse: kNk 64-column slices of the block's key
// rows) and the right-hand side (v forward, d_o reverse: the block's 64 value columns) of a
// chunk, token-major bf16 tiles, and its gates (head gate g; unused with g_gamma).
template <int kNk>
struct PassStage {
  bf16 lhs[kNk][kTileElems];
  bf16 rhs[kTileElems];
  float g[kBT];
};
static_assert(sizeof(PassStage<1>) % 16 == 0, "stages keep the tiles 16-byte aligned");

// kNk = 1: 74,752 bytes, three blocks per SM; kNk = 2: 111,616 bytes, two.
template <int kNk>
constexpr size_t kStatePassSmemBytes = kPassStages * sizeof(PassStage<kNk>);

// bf16 pair x (low half first) times (f.x, f.y), rounded to bf16.
__device__ inline uint32_t ScaleBf16Pair(uint32_t x, float2 f) {
  const __nv_bfloat162 r = __floats2bfloat162_rn(__uint_as_float(x << 16) * f.x,
                                                 __uint_as_float(x & 0xffff0000u) * f.y);
  return *reinterpret_cast<const uint32_t*>(&r);
}

// Grid: (K / (64 kNk) x V / 64 tiles, H, N sequences x passes). passes = 1: the forward pass of
// every sequence (blockIdx.z = n). passes = 2 (backward): blockIdx.z = 2n + r, r = 0 the forward
// pass (recomputing the states), r = 1 the reverse pass. The forward pass starts from
// initial_state and ends in final_state (skipped where null), the reverse pass starts from
// d_final_state and ends in d_initial_state. (The gate parameter, which has one value, lets both
// launchers' translation units define the kernel.)
template <Gate kGate, int kNk>
__global__ void __launch_bounds__(kThreads, kNk == 1 ? 3 : 2)
    StatePassKernel(ChunkGatedParams p, int passes, bf16* states, bf16* d_states) {
  static_assert(kGate == Gate::kHead, "the channel gate's decay is not one factor per token");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  PassStage<kNk>* stages = reinterpret_cast<PassStage<kNk>*>(smem_raw);
  const int n = blockIdx.z / passes, h = blockIdx.y;
  const bool reverse = blockIdx.z % passes == 1;
  const int v_tiles = p.v_dim / kBK;
  const int k0 = blockIdx.x / v_tiles * kNk * kBK, v0 = blockIdx.x % v_tiles * kBK;
  const Seq seq = LocateSeq<kBT>(p, n);
  const int chunks = seq.num_chunks;
  const auto chunk_at = [&](int step) {
    return MakeChunk(n, seq, reverse ? chunks - 1 - step : step);
  };
  const bf16* lhs_src = reverse ? p.q : p.k;
  const bf16* rhs_src = reverse ? p.d_o : p.v;
  // Every address's per-thread part is formed once; a chunk adds its own base.
  const TileCopy lhs_copy(p.qk_strides), rhs_copy(p.v_strides);
  const int gate_row = threadIdx.x;  // threads [0, 64) copy a gate each
  const int64_t gate_offset = gate_row * p.g_strides.token;
  const int64_t chunk_states = int64_t{p.heads} * p.k_dim * p.v_dim;
  bf16* const tile_slots =
      (reverse ? d_states : states) + (int64_t{h} * p.k_dim + k0) * p.v_dim + v0;

  const auto issue = [&](int step) {
    if (step < chunks) {
      PassStage<kNk>& s = stages[step % kPassStages];
      const Chunk c = chunk_at(step);
      const bf16* lhs_rows = ChunkRows(lhs_src, p.qk_strides, c, h, k0);
#pragma unroll
      for (int i = 0; i < kNk; ++i) lhs_copy.Issue(s.lhs[i], lhs_rows + i * kBK, c.rows);
      rhs_copy.Issue(s.rhs, ChunkRows(rhs_src, p.v_strides, c, h, v0), c.rows);
      if (p.g != nullptr && gate_row < kBT) {
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
    const PassStage<kNk>& s = stages[step % kPassStages];

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
    tile::MmaBf16Acc64<false, true, kNk>(acc, kBT, s.lhs[0], kLdBf16, kTileElems, s.rhs, kLdBf16,
                                         scale_rows);
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
