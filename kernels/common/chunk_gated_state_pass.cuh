// chunk_gla's per-chunk states (the per-channel gate) by one sequential pass per state tile, from
// decayed operands written first; and what the head gate's pass (chunk_gated_head_state_pass.cuh)
// shares with it: the stages, the pass sets. Device code; included through chunk_gated.cuh.
// (chunk_gla can also take the two parallel steps of chunk_gated_states.cuh.)
//
// A block carries one tile of one head's state -- key rows [k0, k0 + 64 kNk), value columns
// [v0, v0 + 64) -- through one sequence's chunks in fp32 registers (kNk Acc64), storing it in
// bf16 at every chunk:
//   forward pass:  slot[c] = h_c, the state entering chunk c;
//                  h_{c+1} = diag(2^Gl) h_c + (K_c 2^(Gl - G))^T V_c
//   reverse pass:  slot[c] = dh_c, the gradient of the state leaving chunk c, walking the chunks
//                  backwards;  dh_{c-1} = diag(2^Gl) dh_c + (Q_c scale 2^G)^T dO_c
// (G the chunk-local log2 cumsum of the gate per key channel, Gl its last row.) The decay differs
// per key row and token, so for every chunk at once the decayed keys K 2^(Gl - G) (and, backward,
// the queries Q scale 2^G) and each chunk's Gl per key channel are written first (forward by
// ChannelScoresKernel beside its scores, backward by ChunkDecayKernel); the pass then multiplies
// those unscaled and decays its state rows by 2^Gl of their channel. A chunk costs one barrier:
// the one that hands its copied stage to the warps and frees the stage before it. The tiles
// stream through kPassStages stages of cp.async copies, issued kPassStages - 1 chunks ahead. A
// backward that recomputes the states launches both passes in one grid (the states and their
// gradients), so twice as many blocks share the machine; one given the forward's states
// (ChunkGatedParams::chunk_states) runs the reverse pass alone.
//
// Why a pass and not each chunk's update in parallel and then a scan over the chunks: that writes
// and reads every chunk's update once more (rounded to bf16 before it is summed) -- two more
// passes over a [chunks, H, K, V] tensor. On the H200 at (1,8192,96,128) (then with the head
// gate) the forward's update + scan took 320 + 232 us, the backward's 595 + 2 x 232; this pass's
// forward 420 us as first written, its calls 559 us on average (forward and backward), 518 us
// once the copies' per-thread addresses were formed once (TileCopy) instead of per chunk. The
// states go out in 16-byte stores (Acc64::StoreBf16Global16B: a quad of lanes trades its pairs
// first), whole 32-byte sectors per store instruction instead of halves.
// kNk = 2 (128 key rows per block, two blocks per SM) halves the value tile reads per state
// element but took ~1.3x as long per block as kNk = 1 (64 rows, three blocks per SM; measured
// with the head gate); the launcher (PickPassKeySlices) takes it where it saves waves of blocks.
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

// One stage: the left operand (k forward, q reverse; the channel gate's decayed copies:
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
  const Chunk c = LocateChunk(p, BlockChunk(p.heads, ks));
  const int h = BlockHead(p.heads, ks), k0 = BlockSlice(ks) * kBK;
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

// The passes one StatePassKernel or HeadStatePassKernel grid runs: `count` of them from `first`
// (pass 0 the forward pass, 1 the reverse pass): the forward {0, 1}; the backward {0, 2},
// recomputing the states beside their gradients, or {1, 1} where the forward's states were kept.
struct PassSet {
  int first = 0;
  int count = 1;
};

// A state-pass block's place in the grid (StatePassGrid<kNk>, blockIdx.z = n passes.count + r):
// sequence n, head h, whether it runs the reverse pass (pass passes.first + r), its tile's first
// key row k0 and value column v0, and the sequence's chunks in the order the pass walks them.
struct PassBlock {
  int n, h, k0, v0, chunks;
  bool reverse;
  Seq seq;
  __device__ Chunk At(int step) const {
    return MakeChunk(n, seq, reverse ? chunks - 1 - step : step);
  }
};
template <int kNk>
__device__ inline PassBlock LocatePassBlock(const ChunkGatedParams& p, PassSet passes) {
  PassBlock b;
  b.n = blockIdx.z / passes.count;
  b.h = blockIdx.y;
  b.reverse = passes.first + static_cast<int>(blockIdx.z) % passes.count == 1;
  const int v_tiles = p.v_dim / kBK;
  b.k0 = blockIdx.x / v_tiles * kNk * kBK;
  b.v0 = blockIdx.x % v_tiles * kBK;
  b.seq = LocateSeq<kBT>(p, b.n);
  b.chunks = b.seq.num_chunks;
  return b;
}

// Grid: (K / (64 kNk) x V / 64 tiles, H, N sequences x passes.count), blockIdx.z = n count + r
// running pass first + r. The forward pass starts from initial_state and ends in final_state
// (skipped where null), the reverse pass starts from d_final_state and ends in d_initial_state.
// The decayed operands are in `decayed`.
template <Gate kGate, int kNk>
__global__ void __launch_bounds__(kThreads, kNk == 1 ? 3 : 2)
    StatePassKernel(ChunkGatedParams p, PassSet passes, bf16* states, bf16* d_states,
                    DecayedOperands decayed) {
  static_assert(kGate == Gate::kChannel, "the head gate's pass is HeadStatePassKernel");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  PassStage<kGate, kNk>* stages = reinterpret_cast<PassStage<kGate, kNk>*>(smem_raw);
  const PassBlock pass = LocatePassBlock<kNk>(p, passes);
  const bf16* lhs_src = pass.reverse ? decayed.queries : decayed.keys;
  const bf16* rhs_src = pass.reverse ? p.d_o : p.v;
  // Every address's per-thread part is formed once; a chunk adds its own base. (The decayed
  // operands are [chunks, H, 64, K]: rows K apart.)
  TensorStrides decayed_rows;
  decayed_rows.token = p.k_dim;
  const TileCopy lhs_copy(decayed_rows), rhs_copy(p.v_strides);
  const int64_t chunk_states = int64_t{p.heads} * p.k_dim * p.v_dim;
  bf16* const tile_slots = (pass.reverse ? d_states : states) +
                           (int64_t{pass.h} * p.k_dim + pass.k0) * p.v_dim + pass.v0;

  const auto issue = [&](int step) {
    if (step < pass.chunks) {
      PassStage<kGate, kNk>& s = stages[step % kPassStages];
      const Chunk c = pass.At(step);
      const bf16* lhs_rows = lhs_src + DecayedOffset(p, c.global, pass.h, 0) + pass.k0;
#pragma unroll
      for (int i = 0; i < kNk; ++i) lhs_copy.Issue(s.lhs[i], lhs_rows + i * kBK, c.rows);
      rhs_copy.Issue(s.rhs, ChunkRows(rhs_src, p.v_strides, c, pass.h, pass.v0), c.rows);
      if (threadIdx.x < kNk * kBK / 4) {  // Gl of the block's key rows, four per thread
        __pipeline_memcpy_async(
            &s.g[4 * threadIdx.x],
            decayed.decays + DecayOffset(p, c.global, pass.h, pass.k0) + 4 * threadIdx.x, 16);
      }
    }
    __pipeline_commit();  // one group per step, empty past the end: the waits count steps
  };
  for (int step = 0; step < kPassStages - 1; ++step) issue(step);

  tile::Acc64 acc[kNk];
  const float* first = pass.reverse ? p.d_final_state : p.initial_state;
#pragma unroll
  for (int i = 0; i < kNk; ++i) {
    acc[i].Transform([&](int r, int col, float) {
      return first != nullptr
                 ? first[StateOffset(p, pass.n, pass.h, pass.k0 + i * kBK + r, pass.v0 + col)]
                 : 0.0f;
    });
  }

  for (int step = 0; step < pass.chunks; ++step) {
    const Chunk c = pass.At(step);
    bf16* const slot = tile_slots + c.global * chunk_states;
#pragma unroll
    for (int i = 0; i < kNk; ++i) acc[i].StoreBf16Global16B(slot + i * kBK * p.v_dim, p.v_dim);
    __pipeline_wait_prior(kPassStages - 2);
    __syncthreads();  // this step's stage is in; every warp is done with the previous stage
    issue(step + kPassStages - 1);
    const PassStage<kGate, kNk>& s = stages[step % kPassStages];
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
    tile::MmaBf16Acc64<false, true, kNk>(acc, kBT, s.lhs[0], kLdBf16, kTileElems, s.rhs, kLdBf16,
                                         tile::KeepBFragment{});
  }

  float* last = pass.reverse ? p.d_initial_state : p.final_state;
  if (last != nullptr) {
#pragma unroll
    for (int i = 0; i < kNk; ++i) {
      float* const tile = last + StateOffset(p, pass.n, pass.h, pass.k0 + i * kBK, pass.v0);
      acc[i].ForEachPairAt(p.v_dim, [&](int at, float x0, float x1) {
        *reinterpret_cast<float2*>(tile + at) = make_float2(x0, x1);
      });
    }
  }
}

}  // namespace flame::kernels::gated_chunk
