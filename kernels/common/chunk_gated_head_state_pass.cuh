// chunk_simple_gla's per-chunk states (the per-head gate) by one sequential pass per state tile:
// a block carries key rows [k0, k0 + 64 kNk) x value columns [v0, v0 + 64) of one head's state
// through one sequence's chunks in fp32 registers, storing it in bf16 at every chunk:
//   forward pass:  slot[c] = h_c, the state entering chunk c;
//                  h_{c+1} = 2^Gl h_c + (K_c 2^(Gl - G))^T V_c
//   reverse pass:  slot[c] = dh_c, the gradient of the state leaving chunk c, walking the chunks
//                  backwards;  dh_{c-1} = 2^Gl dh_c + (Q_c scale 2^G)^T dO_c
// (G the chunk-local log2 cumsum of the gate, Gl its last row.) Device code; included through
// chunk_gated.cuh. chunk_gla's pass (the per-channel gate) is StatePassKernel
// (chunk_gated_state_pass.cuh), whose stages and pass sets this one shares.
//
// Each of the block's 4 kNk warps owns 16 key rows of the tile and all 64 of its value columns.
// A head gate is one factor per token, which in K^T V scales the reduction index: each warp
// scans the chunk's 64 gates itself (two per lane, shuffles) and scales its left-operand (K^T)
// fragments as it loads them -- fragments no other warp reads, so each is scaled once, with no
// decayed copy and no barrier for it. A chunk costs one barrier: the one that hands its copied
// stage to the warps and frees the stage before it; the tiles stream through kHeadPassStages
// stages of cp.async copies, issued kHeadPassStages - 1 chunks ahead. A backward that recomputes
// the states launches both passes in one grid; one given the forward's states
// (ChunkGatedParams::chunk_states) runs the reverse pass alone.
// Why: the head gate used StatePassKernel's layout before (eight warps on Acc64's 32 x 16
// pieces, the factors on the right-hand fragments, each loaded and scaled by the two warps of its
// columns). ncu at (1,8192,96,128) on the H200: issue-bound (0.52 instructions per scheduler
// cycle; short-scoreboard stalls between each ldmatrix and its mma, at ~80 registers under its
// three-blocks-per-SM bound), 374 instructions per warp and chunk, a fifth of them the scaling's
// shuffles and multiplies. This layout: 128 registers at four 128-thread blocks per SM, 326 ->
// 295 us per call there; forward + backward 1.89 -> 1.83 ms (further shapes: chunk_gated.cuh,
// PickHeadPassKeySlices). Four stages instead of three measured the same.
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/chunk_gated_params.h"
#include "kernels/common/chunk_gated_state_pass.cuh"
#include "kernels/common/chunk_gated_tiles.cuh"
#include "kernels/common/mma_tile.cuh"

namespace flame::kernels::gated_chunk {

// bf16 pair x (low half first) times (f.x, f.y), rounded to bf16.
__device__ inline uint32_t ScaleBf16Pair(uint32_t x, float2 f) {
  const __nv_bfloat162 r =
      __floats2bfloat162_rn(__uint_as_float(x << 16) * f.x, __uint_as_float(x & 0xffff0000u) * f.y);
  return *reinterpret_cast<const uint32_t*>(&r);
}

// One chunk's factors in a head-gate state pass, from its staged gates g (64 per chunk; unused
// with g_gamma, whose gamma is given): each warp scans the chunk's gates itself, lane l taking
// tokens 2 l and 2 l + 1 (padded rows add 0, so the last lane's sum is the chunk's total). `own`
// holds this lane's tokens' factors, 2^(Gl - G) forward or scale 2^G reverse (exponents <= 0),
// and `decay` 2^Gl.
struct HeadPassFactors {
  float2 own;
  float decay;
};
__device__ inline HeadPassFactors ScanHeadPassGates(const ChunkGatedParams& p, const float* g,
                                                    int rows, float gamma, bool reverse) {
  const int lane = threadIdx.x % 32;
  float2 x = make_float2(0.0f, 0.0f);
  if (p.g != nullptr) {
    x = *reinterpret_cast<const float2*>(&g[2 * lane]);
  } else {
    x.x = 2 * lane < rows ? gamma : 0.0f;
    x.y = 2 * lane + 1 < rows ? gamma : 0.0f;
  }
  float sum = x.x + x.y;
#pragma unroll
  for (int off = 1; off < 32; off *= 2) {
    const float y = __shfl_up_sync(0xffffffffu, sum, off);
    if (lane >= off) sum += y;
  }
  const float g1 = sum * kRcpLn2, g0 = (sum - x.y) * kRcpLn2;
  const float g_last = __shfl_sync(0xffffffffu, sum, 31) * kRcpLn2;
  HeadPassFactors f;
  f.own = reverse ? make_float2(p.scale * exp2f(g0), p.scale * exp2f(g1))
                  : make_float2(exp2f(g_last - g0), exp2f(g_last - g1));
  f.decay = exp2f(g_last);
  return f;
}

// kNk 64-row key slices per block, 128 kNk threads.
template <int kNk>
constexpr int kHeadPassThreads = 128 * kNk;
constexpr int kHeadPassStages = 3;
template <int kNk>
using HeadPassStage = PassStage<Gate::kHead, kNk>;
// Three stages: kNk = 1 56,064 bytes, four blocks per SM; kNk = 2 83,712, two.
template <int kNk>
constexpr size_t kHeadPassSmemBytes = kHeadPassStages * sizeof(HeadPassStage<kNk>);

// Grid: StatePassGrid<kNk> (64 kNk x 64 state tiles, H, N sequences x passes.count); blockIdx.z =
// n count + r runs pass first + r (PassSet). Starts from initial_state (forward) or
// d_final_state (reverse), ends in final_state or d_initial_state, each skipped where null.
template <Gate kGate, int kNk>
__global__ void __launch_bounds__(kHeadPassThreads<kNk>, 4 / kNk)
    HeadStatePassKernel(ChunkGatedParams p, PassSet passes, bf16* states, bf16* d_states) {
  static_assert(kGate == Gate::kHead, "the channel gate's pass is StatePassKernel");
  using Stage = HeadPassStage<kNk>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Stage* stages = reinterpret_cast<Stage*>(smem_raw);
  const PassBlock pass = LocatePassBlock<kNk>(p, passes);
  const bf16* lhs_src = pass.reverse ? p.q : p.k;
  const bf16* rhs_src = pass.reverse ? p.d_o : p.v;
  const TileCopyBy<kHeadPassThreads<kNk>> lhs_copy(p.qk_strides), rhs_copy(p.v_strides);
  const int gate_row = threadIdx.x;  // threads [0, 64) copy a gate each
  const int64_t gate_offset = gate_row * p.g_strides.token;
  const int64_t chunk_states = int64_t{p.heads} * p.k_dim * p.v_dim;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4;
  const int row0 = 16 * warp;  // this warp's key rows in the tile
  bf16* const warp_slots = (pass.reverse ? d_states : states) +
                           (int64_t{pass.h} * p.k_dim + pass.k0 + row0) * p.v_dim + pass.v0;

  const auto issue = [&](int step) {
    if (step < pass.chunks) {
      Stage& s = stages[step % kHeadPassStages];
      const Chunk c = pass.At(step);
      const bf16* lhs_rows = ChunkRows(lhs_src, p.qk_strides, c, pass.h, pass.k0);
#pragma unroll
      for (int i = 0; i < kNk; ++i) lhs_copy.Issue(s.lhs[i], lhs_rows + i * kBK, c.rows);
      rhs_copy.Issue(s.rhs, ChunkRows(rhs_src, p.v_strides, c, pass.h, pass.v0), c.rows);
      if (p.g != nullptr && gate_row < kBT) {
        const bool valid = gate_row < c.rows;
        const float* gates = RowPtr(p.g, p.g_strides, c.batch, c.t0, pass.h);
        __pipeline_memcpy_async(&s.g[gate_row], valid ? gates + gate_offset : gates, sizeof(float),
                                valid ? 0 : sizeof(float));
      }
    }
    __pipeline_commit();  // one group per step, empty past the end: the waits count steps
  };
  for (int step = 0; step < kHeadPassStages - 1; ++step) issue(step);

  // This warp's 16 x 64 rows of the state: acc[j] holds columns [16 j, 16 j + 16), x[4 hh + 2
  // half + b] = (row LaneRow() + 8 half, column 16 j + 8 hh + LaneCol() + b).
  tile::WarpAcc16 acc[4];
  const int lane_row = row0 + tile::WarpAcc16::LaneRow(), lane_col = tile::WarpAcc16::LaneCol();
  const auto for_each_pair = [&](auto f) {  // f(j, e, row, col) for each pair (x[e], x[e + 1])
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
      for (int e = 0; e < 8; e += 2)
        f(j, e, lane_row + 8 * (e / 2 % 2), 16 * j + 8 * (e / 4) + lane_col);
    }
  };
  const float* first = pass.reverse ? p.d_final_state : p.initial_state;
  for_each_pair([&](int j, int e, int r, int col) {
    float2 x = make_float2(0.0f, 0.0f);
    if (first != nullptr) {
      x = *reinterpret_cast<const float2*>(
          first + StateOffset(p, pass.n, pass.h, pass.k0 + r, pass.v0 + col));
    }
    acc[j].x[e] = x.x;
    acc[j].x[e + 1] = x.y;
  });
  const float gamma = p.g_gamma != nullptr ? p.g_gamma[pass.h] : 0.0f;

  for (int step = 0; step < pass.chunks; ++step) {
    const Chunk c = pass.At(step);
    bf16* const slot = warp_slots + c.global * chunk_states;
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[j].StoreBf16Global16B(slot + 16 * j, p.v_dim);
    __pipeline_wait_prior(kHeadPassStages - 2);
    __syncthreads();  // this step's stage is in; every warp is done with the previous stage
    issue(step + kHeadPassStages - 1);
    const Stage& s = stages[step % kHeadPassStages];
    const HeadPassFactors f = ScanHeadPassGates(p, s.g, c.rows, gamma, pass.reverse);
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[j].Scale(f.decay);
    // acc += (lhs * f)^T rhs: A(i, l) = lhs[l][row0 + i] (keys by tokens), whose fragment at k
    // offset l holds tokens l + 2t, l + 2t + 1 (a0, a1) and those + 8 (a2, a3), the token pairs
    // l / 2 + t and l / 2 + t + 4; B(l, col) = rhs[l][col].
    const tile::Bf16AOperand<false> a(s.lhs[warp / 4] + row0 % kBK, kLdBf16);
    const tile::Bf16BOperand<true> rhs_operand(s.rhs, kLdBf16);
#pragma unroll
    for (int l = 0; l < kBT; l += 16) {
      uint32_t fa[4];
      a.Load(fa, l);
      const int pair = l / 2 + t;
      const float2 lo = make_float2(__shfl_sync(0xffffffffu, f.own.x, pair),
                                    __shfl_sync(0xffffffffu, f.own.y, pair));
      const float2 hi = make_float2(__shfl_sync(0xffffffffu, f.own.x, pair + 4),
                                    __shfl_sync(0xffffffffu, f.own.y, pair + 4));
      fa[0] = ScaleBf16Pair(fa[0], lo);
      fa[1] = ScaleBf16Pair(fa[1], lo);
      fa[2] = ScaleBf16Pair(fa[2], hi);
      fa[3] = ScaleBf16Pair(fa[3], hi);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t fb[4];
        ptx::LoadMatrix4Trans(fb, rhs_operand.base + 2 * (l * kLdBf16 + 16 * j));
        ptx::MmaM16N8K16Bf16(acc[j].x, fa, fb[0], fb[1]);
        ptx::MmaM16N8K16Bf16(acc[j].x + 4, fa, fb[2], fb[3]);
      }
    }
  }

  float* last = pass.reverse ? p.d_initial_state : p.final_state;
  if (last != nullptr) {
    for_each_pair([&](int j, int e, int r, int col) {
      *reinterpret_cast<float2*>(last +
                                 StateOffset(p, pass.n, pass.h, pass.k0 + r, pass.v0 + col)) =
          make_float2(acc[j].x[e], acc[j].x[e + 1]);
    });
  }
}

}  // namespace flame::kernels::gated_chunk
