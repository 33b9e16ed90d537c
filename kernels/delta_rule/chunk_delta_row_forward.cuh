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

constexpr int kRowForwardThreads = 256;  // two warpgroups: the state's chain, and its outputs

// One chunk's tiles of the state's chain: the keys and W (kNk swizzled tiles each, adjacent for
// the zeroing past a chunk's end), the 64 value columns of U that hold the block's 32, then G;
// 1024-byte aligned.
template <int kNk>
struct RowForwardSet {
  static constexpr int kKeys = 0, kW = kNk * kSwizzledTileBytes;
  static constexpr int kU = 2 * kNk * kSwizzledTileBytes;
  static constexpr int kG = kU + kSwizzledTileBytes;
  static constexpr int kBytes = AlignSwizzled(kG + kBT * 4);
  static constexpr int kTiles = 2 * kNk + 1;
};
// One chunk's tiles of o: the queries (kNk) and M.
template <int kNk>
struct RowOutputSet {
  static constexpr int kQueries = 0, kM = kNk * kSwizzledTileBytes;
  static constexpr int kBytes = kM + kSwizzledTileBytes;
  static constexpr int kTiles = kNk + 1;
};

// Shared memory: two chain tile sets; (kOutput) two output tile sets; by chunk parity, the
// state's bf16 copy (kNk columns tiles) and Ut's (one), which the chain hands to the outputs'
// warpgroup; the decayed Ut (gated: the chain's own); by chunk parity, each chain warp's staging
// blocks (the state's kNk, Ut's); (kOutput) each output warp's staging block for o; the copy
// barriers (the chain sets', the output sets').
template <int kNk, bool kOutput>
struct RowForwardLayout {
  using Set = RowForwardSet<kNk>;
  using OutSet = RowOutputSet<kNk>;
  static constexpr int kOutSets = 2 * Set::kBytes;
  static constexpr int kStateCopy = kOutSets + (kOutput ? 2 * OutSet::kBytes : 0);
  static constexpr int kStateCopyBytes = kNk * kColumnsTileBytes;  // one chunk parity's
  static constexpr int kRaw = kStateCopy + 2 * kStateCopyBytes;
  static constexpr int kDecayed = kRaw + 2 * kColumnsTileBytes;
  static constexpr int kStages = kDecayed + kColumnsTileBytes;
  static constexpr int kWarpStages = (kNk + 1) * kWarpStageBytes;  // a chain warp's
  static constexpr int kStageSet = 4 * kWarpStages;                // one chunk parity's
  static constexpr int kOStages = kStages + 2 * kStageSet;
  static constexpr int kBars = kOStages + (kOutput ? 4 * kWarpStageBytes : 0);
  static constexpr int kBytes = kBars + kCopyBarrierBytes;
};

// The named barriers between the two warpgroups (ptx::NamedBarrierSync; 0 is __syncthreads'):
// each group's own, and per chunk parity "the chain's values of the chunk are in" (the chain
// arrives, the outputs wait) and "the outputs are done with them" (the reverse).
enum RowForwardBarrier : int {
  kChainBar = 1,
  kOutputBar = 2,
  kValuesInBar = 3,
  kValuesFreeBar = 5
};

// Per chunk, in order: S[chunk] = S;  Ut = U - W S;  S = gamma_L S + K^T (diag(exp(G_L - G)) Ut);
// with kOutput also o = scale [diag(gamma) Q S + M Ut] (OutputKernel's, which then does not run).
// One block per (32 value columns, head, sequence), of two warpgroups. The first runs the
// state's chain; per chunk, after the swap of the tile sets and the state's copy (one barrier):
//   Ut = U - W S:  K / 16 steps of 64 x 32 x 16, A = W;
// and after the new values' copies (the second barrier):
//   S_j = gamma_L S_j + (K_j)^T Ut'  for each 64-row slice j of the state (4 steps each).
// The second takes everything the chain does not wait for: per chunk, once the chain has put the
// state's bf16 copy and Ut (in buffers by chunk parity, so that the chain runs a chunk ahead),
// S[chunk] and Ut to the scratch (from the chain warps' staging blocks), and with kOutput
//   o = scale [diag(gamma) Q S + M Ut]  (K / 16 + 4 steps, its own copies of the queries and M).
// The chain's tiles, U's included, come by the copy engine: it has no loads of its own in flight
// at its proxy fences, which wait for them.
// The two branches run products of their own; the warpgroup index comes through __shfl_sync,
// which ptxas takes as warp-uniform (with threadIdx.x / 128 it serialises the products, C7520).
//
// Measured on the H200 at (2, 16384, 16, 128), ncu per call beside the one-warpgroup pass in the
// same run (437-439 us): this pass 384 us. Its steps: the one-warpgroup pass without o (the
// OutputKernel's then) 339 us, and without o and the copies out (its chain alone, not a result)
// 260; two warpgroups with U still loaded a chunk ahead into the chain's registers 418-419 (ncu
// had the chain waiting on the long scoreboard at the top of the chunk and at its proxy fences:
// ~35% of its stall samples), and with three handoff buffers and o's products before the copies
// out 432; U by the copy engine in the one-warpgroup pass 448.
template <int kNk, bool kOutput>
__global__ void __launch_bounds__(kRowForwardThreads, 1)
    StateForwardRowsKernel(const __grid_constant__ StepBase b) {
#ifdef FLAME_WGMMA_DEVICE
  using L = RowForwardLayout<kNk, kOutput>;
  using Set = typename L::Set;
  using OutSet = typename L::OutSet;
  constexpr int K = kNk * kBT;
  constexpr int kGroup = kRowForwardThreads / 2;
  extern __shared__ float4 smem4[];
  char* at;
  const uint32_t at_s = AlignedSharedBase(smem4, &at);
  const ChunkDeltaParams& p = b.p;
  const int V = p.v_dim, H = p.heads;
  const int v0 = blockIdx.x * kRowFormCols, h = blockIdx.y, n = blockIdx.z;
  const int group = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / kGroup, 0);
  const int warp = threadIdx.x / 32 % 4, warp_row = 16 * warp;
  const Seq seq = LocateSeq<kBT>(p, n);
  const SeqSources src(p, seq, h);
  const int64_t ld_k = int64_t{H} * K, ld_v = int64_t{H} * V;
  uint64_t* bars = reinterpret_cast<uint64_t*>(at + L::kBars);
  // (The copy engine always: this kernel runs only where b.tile_copies holds.)
  const auto bar = [&](int i) { return CopyBarrier(bars + i, true); };
  if (threadIdx.x < 4) bar(threadIdx.x).Init();
  __syncthreads();
  // The chain warp's staging blocks of chunk parity `buf` (the output warp of the same index
  // copies them out).
  const auto chain_stage = [&](int buf) {
    const uint32_t off = L::kStages + buf * L::kStageSet + warp * L::kWarpStages;
    return WarpStage(at_s + off, at + off);
  };
  constexpr uint32_t kUtStage = kNk * kWarpStageBytes;
  const uint64_t s_desc = wgmma::DescriptorSwizzle128(at_s + L::kStateCopy);
  const uint64_t raw_desc = wgmma::DescriptorSwizzle128(at_s + L::kRaw);
  constexpr uint64_t kStateCopyStep = L::kStateCopyBytes / 16, kRawStep = kColumnsTileBytes / 16;

  if (group == 0) {
    // The state's chain. Its tiles come by the copy engine, U's too: the chain has no loads of
    // its own in flight at its proxy fences, which wait for them (U loaded a chunk ahead into
    // registers, they did). The gate's G by cp.async, the gated rule's only.
    const int u_col0 = v0 / kBT * kBT, u_half = v0 % kBT;  // U's box, the block's columns in it
    const auto issue = [&](int ci) {
      const uint32_t set = at_s + (ci & 1) * Set::kBytes;
      const int rows = src.Rows(ci), row = src.RowAt(ci);
      const TileGroup tiles(bar(ci & 1), Set::kTiles);
      tiles.Token(set + Set::kKeys, &b.maps.kn, 0, kNk, h, row, b.s.kn + src.TokAt(ci, K), ld_k,
                  rows);
      tiles.Token(set + Set::kW, &b.maps.w, 0, kNk, h, row, b.s.W + src.TokAt(ci, K), ld_k, rows);
      tiles.Token(set + Set::kU, &b.maps.u, u_col0, 1, h, row, b.s.U + src.TokAt(ci, V) + u_col0,
                  ld_v, rows);
      if (b.gated) {
        IssueChunkG(reinterpret_cast<float*>(at + (ci & 1) * Set::kBytes + Set::kG),
                    b.s.G + src.TokAt(ci, 1), H, rows);
      }
    };
    const uint64_t w_desc = wgmma::DescriptorSwizzle128(at_s + Set::kW);
    // The update's B: the decayed Ut where the decays are not 1, else Ut's own tile.
    const uint64_t decayed_desc = wgmma::DescriptorSwizzle128(at_s + L::kDecayed);
    const ColumnsTile state_tile(at_s + L::kStateCopy), raw_tile(at_s + L::kRaw),
        decayed_tile(at_s + L::kDecayed);

    GroupAcc32 S[kNk];                             // state rows 64 j + GroupAcc32::Row(h)
    const int64_t state_at = State(p, n, h) + v0;  // of the initial and final states
#pragma unroll
    for (int j = 0; j < kNk; ++j) {
      S[j].LoadState(p.initial_state ? p.initial_state + state_at + j * kBT * V : nullptr, V);
    }
    // The state's bf16 copy of chunk ci, into its parity's handoff buffer once the outputs are
    // done with chunk ci - 2: put at the end of the chunk before, once its update is done (the
    // first one before the loop).
    const auto put_state_copy = [&](int ci) {
      if (ci >= 2) ptx::NamedBarrierSync(kValuesFreeBar + (ci & 1), kRowForwardThreads);
      PutStateCopy(S, state_tile, chain_stage(ci & 1), (ci & 1) * L::kStateCopyBytes);
    };
    if (seq.num_chunks > 0) {
      issue(0);
      put_state_copy(0);
    }
    __pipeline_commit();
    for (int ci = 0; ci < seq.num_chunks; ++ci) {
      const int rows = src.Rows(ci), buf = ci & 1;
      const uint32_t set = buf * Set::kBytes;
      const uint64_t set_desc = set / 16;
      const float* G = reinterpret_cast<const float*>(at + set + Set::kG);
      const WarpStage stage = chain_stage(buf);
      bar(buf).Wait(ci >> 1);
      if (rows < kBT) {  // the garbage rows of the keys and W (adjacent) past the chunk's end
        ZeroRowsPast<kGroup>(reinterpret_cast<bf16*>(at + set + Set::kKeys), 2 * kNk, rows);
      }
      __pipeline_wait_prior(0);  // G
      wgmma::FenceSharedForProducts();
      ptx::NamedBarrierSync(kChainBar, kGroup);  // this chunk's tiles and the state's copy are in
      if (ci + 1 < seq.num_chunks) issue(ci + 1);
      __pipeline_commit();

      // Ut = U - W S: -W S, and U from its tile while the product runs. Then Ut to its columns
      // tile, as is (the outputs' M Ut; the ungated update's B) and decayed by exp(G_L - G) for
      // the gated update, and to the stage for the scratch.
      GroupAcc32 ut, u;  // ut set by the product's first step
      wgmma::Fence();
      MultiplyStateCopy<kNk, true, false>(ut.d, w_desc + set_desc, s_desc + buf * kStateCopyStep);
      wgmma::Commit();
      u.LoadSwizzled(at_s + set + Set::kU, u_half, rows);
      wgmma::Wait<0>();
#pragma unroll
      for (int e = 0; e < 16; ++e) ut.d[e] += u.d[e];
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        uint32_t a[4];
        ut.Bf16A(c, a);
        stage.Put(kUtStage, c, a);
        raw_tile.Put(buf * kColumnsTileBytes, c, a);
      }
      if (b.gated) {
        const float G_last = G[rows - 1];
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
      ptx::NamedBarrierArrive(kValuesInBar + buf, kRowForwardThreads);
      ptx::NamedBarrierSync(kChainBar, kGroup);  // the new values' tiles are in

      // S_j = gamma_L S_j + K_j^T Ut'.
      wgmma::Fence();
      AddTransposedProducts<kNk, false>(S, k_a, b.gated ? decayed_desc : raw_desc + buf * kRawStep);
      wgmma::Commit();
      wgmma::Wait<0>();
      if (ci + 1 < seq.num_chunks) put_state_copy(ci + 1);
    }
    if (p.final_state) {
#pragma unroll
      for (int j = 0; j < kNk; ++j) S[j].StoreState(p.final_state + state_at + j * kBT * V, V);
    }
    return;
  }

  // The outputs: each chunk's S[chunk] and Ut to the scratch, and with kOutput o.
  const auto issue_out = [&](int ci) {
    const uint32_t set = at_s + L::kOutSets + (ci & 1) * OutSet::kBytes;
    const TileGroup tiles(bar(2 + (ci & 1)), OutSet::kTiles, kGroup);
    tiles.Token(set + OutSet::kQueries, &b.maps.qn, 0, kNk, h, src.RowAt(ci),
                b.s.qn + src.TokAt(ci, K), ld_k, src.Rows(ci));
    tiles.Block(set + OutSet::kM, &b.maps.M, 0, src.MatRowAt(ci),
                b.s.M + Mat(p, seq.first_chunk + ci, h), kBT);
  };
  const uint64_t q_desc = wgmma::DescriptorSwizzle128(at_s + L::kOutSets + OutSet::kQueries);
  const uint64_t m_desc = wgmma::DescriptorSwizzle128(at_s + L::kOutSets + OutSet::kM);
  const uint32_t o_off = L::kOStages + warp * kWarpStageBytes;
  const WarpStage o_stage(at_s + o_off, at + o_off);
  bf16* o_chunk = kOutput ? p.o + In(p.v_strides, seq.batch, seq.bos, h) + v0 : nullptr;
  const int64_t o_step = int64_t{kBT} * p.v_strides.token;
  if (kOutput && seq.num_chunks > 0) issue_out(0);
  for (int ci = 0; ci < seq.num_chunks; ++ci) {
    const int rows = src.Rows(ci), buf = ci & 1;
    if (kOutput && ci + 1 < seq.num_chunks) issue_out(ci + 1);
    float g_rows[2] = {0.0f, 0.0f};  // the gate's cumsum at the lane's rows of o
    if (kOutput && b.gated) {
      const float* G = b.s.G + src.TokAt(ci, 1);
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) g_rows[hr] = G[min(GroupAcc32::Row(hr), rows - 1) * H];
    }
    ptx::NamedBarrierSync(kValuesInBar + buf, kRowForwardThreads);
    const WarpStage stage = chain_stage(buf);
    CopyOutState<kNk>(stage, b.s.S + src.StateAt(ci, K * V) + int64_t{warp_row} * V + v0, V);
    stage.CopyOut(kUtStage, b.s.Ut + src.TokAt(ci, V) + warp_row * ld_v + v0, ld_v,
                  rows - warp_row);
    if (kOutput) {
      const uint64_t out_desc = buf * (OutSet::kBytes / 16);
      GroupAcc32 o;  // set by its first step
      bar(2 + buf).Wait(ci >> 1);
      wgmma::Fence();
      MultiplyStateCopy<kNk, false, false>(o.d, q_desc + out_desc, s_desc + buf * kStateCopyStep);
      wgmma::Commit();
      if (b.gated) {
        wgmma::Wait<0>();
        o.ScaleRowPair(__expf(g_rows[0]), __expf(g_rows[1]));
      }
      wgmma::Fence();
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        wgmma::MmaSharedA32<false>(o.d, m_desc + out_desc + 2 * s,
                                   raw_desc + buf * kRawStep + 2 * s);
      }
      wgmma::Commit();
      wgmma::Wait<0>();
      o.Scale(p.scale);
      __syncwarp();  // the stage's reads of the chunk before are done
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        uint32_t a[4];
        o.Bf16A(c, a);
        o_stage.Put(0, c, a);
      }
      __syncwarp();
      o_stage.CopyOut(0, o_chunk + ci * o_step + warp_row * p.v_strides.token, p.v_strides.token,
                      rows - warp_row);
    }
    // The chain may overwrite this parity's buffers (its chunk ci + 2, if any).
    if (ci + 2 < seq.num_chunks) ptx::NamedBarrierArrive(kValuesFreeBar + buf, kRowForwardThreads);
    // The output set of this parity is free for chunk ci + 2's copies (issued by one thread).
    if (kOutput) ptx::NamedBarrierSync(kOutputBar, kGroup);
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
