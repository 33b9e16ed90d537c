// The forward state pass of the chunked delta rule in row form on warpgroup products (sm_90a;
// chunk_delta_rows.cuh says what the row form is and why).
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/ptx.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/delta_rule/chunk_delta_rows.cuh"
#include "kernels/delta_rule/chunk_delta_state_pass.cuh"  // SeqSources

namespace flame::kernels::delta_chunk::tiles {

// One chunk's tiles of the row-form forward pass: the keys and W (kNk swizzled tiles each), with
// kOutput the queries (kNk) and M, then G; 1024-byte aligned.
template <int kNk, bool kOutput>
struct RowForwardSet {
  static constexpr int kKeys = 0, kW = kNk * kSwizzledTileBytes;
  static constexpr int kQueries = 2 * kNk * kSwizzledTileBytes;
  static constexpr int kM = (kOutput ? 3 : 2) * kNk * kSwizzledTileBytes;
  static constexpr int kG = kM + (kOutput ? kSwizzledTileBytes : 0);
  static constexpr int kBytes = AlignSwizzled(kG + kBT * 4);
  static constexpr int kTiles = (kOutput ? 3 : 2) * kNk + (kOutput ? 1 : 0);
};

// Shared memory: two tile sets, the state's bf16 copy (kNk columns tiles), the decayed new values'
// and (kOutput) the new values' columns tiles, each warp's staging blocks (the state's kNk, the new
// values', o's), the copy barriers.
template <int kNk, bool kOutput>
struct RowForwardLayout {
  using Set = RowForwardSet<kNk, kOutput>;
  static constexpr int kStateCopy = 2 * Set::kBytes;
  static constexpr int kDecayed = kStateCopy + kNk * kColumnsTileBytes;
  static constexpr int kRaw = kDecayed + kColumnsTileBytes;
  static constexpr int kStages = kRaw + (kOutput ? kColumnsTileBytes : 0);
  static constexpr int kWarpStages = (kNk + 2) * kWarpStageBytes;  // a warp's
  static constexpr int kBars = kStages + 4 * kWarpStages;
  static constexpr int kBytes = kBars + kCopyBarrierBytes;
};

// Per chunk, in order: S[chunk] = S;  Ut = U - W S;  S = gamma_L S + K^T (diag(exp(G_L - G)) Ut);
// with kOutput also o = scale [diag(gamma) Q S + M Ut] (OutputKernel's, which then does not run).
// One block (a warpgroup) per (32 value columns, head, sequence). Per chunk, after the swap of
// the tile sets and the state's copy (one barrier):
//   Ut = U - W S, o = Q S:  K / 16 steps of 64 x 32 x 16 each, A = W or the queries;
// and after the new values' copies (the second barrier):
//   S_j = gamma_L S_j + (K_j)^T Ut'  for each 64-row slice j of the state (4 steps each),
//   o += M Ut  (4 steps).
// Q S and M Ut run in groups of their own, which the state's chain does not wait for. The
// state's bf16 copy (the scratch's S[chunk]), Ut and o leave through each warp's staging blocks
// (WarpStage) while products run.
template <int kNk, bool kOutput>
__global__ void __launch_bounds__(kRowFormThreads, 1)
    StateForwardRowsKernel(const __grid_constant__ StepBase b) {
#ifdef FLAME_WGMMA_DEVICE
  using L = RowForwardLayout<kNk, kOutput>;
  using Set = typename L::Set;
  constexpr int K = kNk * kBT;
  extern __shared__ float4 smem4[];
  char* at;
  const uint32_t at_s = AlignedSharedBase(smem4, &at);
  const ChunkDeltaParams& p = b.p;
  const int V = p.v_dim, H = p.heads;
  const int v0 = blockIdx.x * kRowFormCols, h = blockIdx.y, n = blockIdx.z;
  const int warp_row = 16 * (threadIdx.x / 32);
  // The warp's staging blocks: the state's rows 64 j + warp_row (j < kNk), Ut's, o's.
  const uint32_t stage_off = L::kStages + threadIdx.x / 32 * L::kWarpStages;
  const WarpStage stage(at_s + stage_off, at + stage_off);
  constexpr uint32_t kUtStage = kNk * kWarpStageBytes, kOStage = kUtStage + kWarpStageBytes;
  const Seq seq = LocateSeq<kBT>(p, n);
  const SeqSources src(p, seq, h);
  const int64_t ld_k = int64_t{H} * K, ld_v = int64_t{H} * V;
  uint64_t* bars = reinterpret_cast<uint64_t*>(at + L::kBars);
  // (The copy engine always: this kernel runs only where b.tile_copies holds.)
  const auto bar = [&](int i) { return CopyBarrier(bars + i, true); };
  if (threadIdx.x < 2) bar(threadIdx.x).Init();
  __syncthreads();
  const auto issue = [&](int ci) {
    const uint32_t set = at_s + (ci & 1) * Set::kBytes;
    const int rows = src.Rows(ci), row = src.RowAt(ci);
    const TileGroup tiles(bar(ci & 1), Set::kTiles);
    tiles.Token(set + Set::kKeys, &b.maps.kn, 0, kNk, h, row, b.s.kn + src.TokAt(ci, K), ld_k,
                rows);
    tiles.Token(set + Set::kW, &b.maps.w, 0, kNk, h, row, b.s.W + src.TokAt(ci, K), ld_k, rows);
    if (kOutput) {
      tiles.Token(set + Set::kQueries, &b.maps.qn, 0, kNk, h, row, b.s.qn + src.TokAt(ci, K), ld_k,
                  rows);
      tiles.Block(set + Set::kM, &b.maps.M, 0, src.MatRowAt(ci),
                  b.s.M + Mat(p, seq.first_chunk + ci, h), kBT);
    }
    IssueChunkG(reinterpret_cast<float*>(at + (ci & 1) * Set::kBytes + Set::kG),
                b.s.G + src.TokAt(ci, 1), H, rows);
  };
  // The products' descriptors (set 0's; set 1's Set::kBytes on).
  const uint64_t w_desc = wgmma::DescriptorSwizzle128(at_s + Set::kW);
  const uint64_t q_desc = wgmma::DescriptorSwizzle128(at_s + Set::kQueries);
  const uint64_t m_desc = wgmma::DescriptorSwizzle128(at_s + Set::kM);
  const uint64_t s_desc = wgmma::DescriptorSwizzle128(at_s + L::kStateCopy);
  const uint64_t decayed_desc = wgmma::DescriptorSwizzle128(at_s + L::kDecayed);
  // The new values undecayed for M Ut: their own tile only where the decays are not 1.
  const uint32_t raw_at = at_s + (b.gated ? L::kRaw : L::kDecayed);
  const uint64_t raw_desc = wgmma::DescriptorSwizzle128(raw_at);
  const ColumnsTile state_tile(at_s + L::kStateCopy), decayed_tile(at_s + L::kDecayed),
      raw_tile(raw_at);

  GroupAcc32 S[kNk];  // state rows 64 j + GroupAcc32::Row(h)
  const int64_t state_at = State(p, n, h) + v0;  // of the initial and final states
#pragma unroll
  for (int j = 0; j < kNk; ++j) {
    S[j].LoadState(p.initial_state ? p.initial_state + state_at + j * kBT * V : nullptr, V);
  }
  uint32_t u_next[8];  // U of the next chunk, loaded a chunk ahead (bf16 pairs)
  if (seq.num_chunks > 0) {
    issue(0);
    GroupAcc32::LoadPairs(u_next, b.s.U + src.TokAt(0, V) + v0, ld_v, src.Rows(0));
  }
  __pipeline_commit();
  bf16* o_chunk = kOutput ? p.o + In(p.v_strides, seq.batch, seq.bos, h) + v0 : nullptr;
  const int64_t o_step = int64_t{kBT} * p.v_strides.token;
  // kOutput: o of a chunk leaves during the next chunk's first products (and after the last).
  const auto o_out = [&](int ci) {
    stage.CopyOut(kOStage, o_chunk + ci * o_step + warp_row * p.v_strides.token, p.v_strides.token,
                  src.Rows(ci) - warp_row);
  };
  for (int ci = 0; ci < seq.num_chunks; ++ci) {
    const int rows = src.Rows(ci);
    const uint32_t set = (ci & 1) * Set::kBytes;
    const uint64_t set_desc = set / 16;
    const float* G = reinterpret_cast<const float*>(at + set + Set::kG);
    // The state's bf16 copy (the products before read the last one; their waits are behind).
    __syncwarp();  // the state stage's reads of the chunk before are done
    PutStateCopy(S, state_tile, stage);
    GroupAcc32 ut;
    ut.SetPairs(u_next);
    bar(ci & 1).Wait(ci >> 1);
    if (rows < kBT) {  // the garbage rows of the keys and W (adjacent) past the chunk's end
      ZeroRowsPast<kRowFormThreads>(reinterpret_cast<bf16*>(at + set + Set::kKeys), 2 * kNk, rows);
    }
    __pipeline_wait_prior(0);  // G
    wgmma::FenceSharedForProducts();
    __syncthreads();  // this chunk's tiles and the state's copy are in; the other set is free
    if (ci + 1 < seq.num_chunks) {
      issue(ci + 1);
      GroupAcc32::LoadPairs(u_next, b.s.U + src.TokAt(ci + 1, V) + v0, ld_v, src.Rows(ci + 1));
    }
    __pipeline_commit();

    // Ut = U - W S (the accumulators start from U), then o = Q S in a group of its own, off the
    // state's chain: the new values wait for W S only.
    GroupAcc32 o;  // set by its first step
    wgmma::Fence();
    MultiplyStateCopy<kNk, true, true>(ut.d, w_desc + set_desc, s_desc);
    wgmma::Commit();
    if (kOutput) {
      MultiplyStateCopy<kNk, false, false>(o.d, q_desc + set_desc, s_desc);
      wgmma::Commit();
    }
    // S[chunk] (bf16) to the scratch, and the chunk before's o, while the products run.
    __syncwarp();
    bf16* s_dst = b.s.S + src.StateAt(ci, K * V) + int64_t{warp_row} * V + v0;
    CopyOutState<kNk>(stage, s_dst, V);
    if (kOutput && ci > 0) o_out(ci - 1);
    wgmma::Wait<kOutput ? 1 : 0>();

    // Ut to its columns tiles, as is for M Ut and decayed by exp(G_L - G) for the update (the
    // ungated rule's decays are 1: one tile), and to the stage for the scratch.
    const float G_last = G[rows - 1];
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      uint32_t a[4];
      ut.Bf16A(c, a);
      stage.Put(kUtStage, c, a);
      if (kOutput || !b.gated) raw_tile.Put(0, c, a);
    }
    if (b.gated) {
      ut.ScaleRows([&](int r) { return __expf(G_last - G[r]); });
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        uint32_t a[4];
        ut.Bf16A(c, a);
        decayed_tile.Put(0, c, a);
      }
      const float gamma_last = __expf(G_last);
#pragma unroll
      for (int j = 0; j < kNk; ++j) S[j].Scale(gamma_last);
    }
    // The keys' transposed A fragments (each warp its 16 state rows of slice j).
    uint32_t k_a[kNk][4][4];
    LoadTransposedA(k_a, at_s + set + Set::kKeys, warp_row);
    wgmma::FenceSharedForProducts();
    __syncthreads();  // the new values' tiles are in

    // S_j = gamma_L S_j + K_j^T Ut'; then, once Q S is done, o = diag(gamma) Q S + M Ut.
    wgmma::Fence();
    AddTransposedProducts<kNk, false>(S, k_a, decayed_desc);
    wgmma::Commit();
    if (kOutput) {
      wgmma::Wait<1>();  // Q S
      if (b.gated) o.ScaleRows([&](int r) { return __expf(G[r]); });
      wgmma::Fence();
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        wgmma::MmaSharedA32<false>(o.d, m_desc + set_desc + 2 * s, raw_desc + 2 * s);
      }
      wgmma::Commit();
    }
    __syncwarp();
    stage.CopyOut(kUtStage, b.s.Ut + src.TokAt(ci, V) + warp_row * ld_v + v0, ld_v,
                  rows - warp_row);
    wgmma::Wait<0>();
    if (kOutput) {
      o.Scale(p.scale);
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        uint32_t a[4];
        o.Bf16A(c, a);
        stage.Put(kOStage, c, a);
      }
    }
  }
  if (kOutput && seq.num_chunks > 0) {
    __syncwarp();
    o_out(seq.num_chunks - 1);
  }
  if (p.final_state) {
#pragma unroll
    for (int j = 0; j < kNk; ++j) S[j].StoreState(p.final_state + state_at + j * kBT * V, V);
  }
#else
  __trap();  // launched only where the binary has sm_90a code (FLAME_KERNELS_SM90A)
#endif
}

template <bool kOutput>
inline size_t StateForwardRowsSmem(int k_dim) {
  return kSwizzleAlign + (k_dim == kBT ? RowForwardLayout<1, kOutput>::kBytes
                                       : RowForwardLayout<2, kOutput>::kBytes);
}

// The pass's instantiations for K = 64 nk, nk = 1 or 2 (the launcher takes it only there).
template <bool kOutput>
inline void (*StateForwardRowsFor(int nk))(StepBase) {
  return nk == 1 ? StateForwardRowsKernel<1, kOutput> : StateForwardRowsKernel<2, kOutput>;
}

}  // namespace flame::kernels::delta_chunk::tiles
