// The backward state pass of the chunked delta rule in row form on warpgroup products (sm_90a;
// chunk_delta_rows.cuh says what the row form is and why).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/ptx.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/delta_rule/chunk_delta_rows.cuh"
#include "kernels/delta_rule/chunk_delta_state_pass.cuh"  // SeqSources

namespace flame::kernels::delta_chunk::tiles {

constexpr int kRowBackwardThreads = 256;  // two warpgroups: dS's chain, and its helper

// One chunk's tiles of the row-form backward pass: the keys, the queries and W (kNk swizzled
// tiles each; the three adjacent, for the zeroing past a chunk's end) and M; 1024-byte aligned.
template <int kNk>
struct RowBackwardSet {
  static constexpr int kKeys = 0, kQueries = kNk * kSwizzledTileBytes;
  static constexpr int kW = 2 * kNk * kSwizzledTileBytes, kM = 3 * kNk * kSwizzledTileBytes;
  static constexpr int kBytes = AlignSwizzled(kM + kSwizzledTileBytes);
  static constexpr int kTiles = 3 * kNk + 1;
};

// What the helper hands the chain per chunk, by iteration parity: the columns tiles of scale
// diag(gamma) dO and of scale dO (where the decays are not 1), and each chain lane's decays
// (exp(G_L - G) at its two rows, gamma_L; a float4 a lane).
struct RowBackwardDO {
  static constexpr int kGammaDO = 0, kScaledDO = kColumnsTileBytes;
  static constexpr int kDecays = 2 * kColumnsTileBytes;
  static constexpr int kBytes = kDecays + 128 * 16;
};

// Shared memory: two tile sets; the columns tiles (chunk_delta_rows.cuh) of dS's bf16 copy (kNk)
// and of dUt, the chain's own; two RowBackwardDO; by iteration parity, each chain warp's staging
// blocks (dS's kNk, dUt's), which the helper copies out; the copy barriers.
template <int kNk>
struct RowBackwardLayout {
  using Set = RowBackwardSet<kNk>;
  static constexpr int kStateCopy = 2 * Set::kBytes;
  static constexpr int kDUt = kStateCopy + kNk * kColumnsTileBytes;
  static constexpr int kDO = kDUt + kColumnsTileBytes;  // 1024-aligned: RowBackwardDO's tiles
  static constexpr int kStages = kDO + 2 * RowBackwardDO::kBytes;
  static constexpr int kWarpStages = (kNk + 1) * kWarpStageBytes;  // a chain warp's
  static constexpr int kStageSet = 4 * kWarpStages;                // one iteration parity's
  static constexpr int kBars = kStages + 2 * kStageSet;
  static constexpr int kBytes = kBars + kCopyBarrierBytes;
};

// The named barriers between the two warpgroups (ptx::NamedBarrierSync; 0 is __syncthreads'):
// the chain's own, and per iteration parity "dO's tiles and the decays are in" (the helper
// arrives, the chain waits), "the chain is done with them" (the reverse), "dS's copy and dUt are
// staged" (the chain arrives) and "the helper has copied them out" (the reverse).
enum RowBackwardBarrier : int {
  kBackChainBar = 1,
  kDOInBar = 2,
  kDOFreeBar = 4,
  kStagedBar = 6,
  kStageFreeBar = 8
};

// Per chunk, in reverse, with dS the gradient of the state leaving the chunk (the mma.sync pass's
// formulas, StateBackwardKernel, with M^T dO formed here):
//   dS[chunk] = dS;  dUt = diag(exp(G_L - G) K dS + scale M^T dO;
//   dS = gamma_L dS + Q^T (scale diag(gamma) dO) - W^T dUt.
// One block per (32 value columns, head, sequence), of two warpgroups. The first runs dS's
// chain: after the swap of the tile sets and dS's copy (one barrier), in two groups of products:
//   K dS (K / 16 steps of 64 x 32 x 16, A = the key tiles) and M^T dO (4 steps, A = M's transposed
//   fragments), which dUt waits for;
//   dS_j = gamma_L dS_j + Q_j^T (scale diag(gamma) dO) (4 steps per 64-row slice j, A = the
//   queries' transposed fragments), which nothing waits for until the chunk's end;
// and after dUt's copy (the second barrier), dS_j -= W_j^T dUt (4 steps each). Its tiles come by
// the copy engine. The second warpgroup loads dO and G (into registers, two chunks ahead of their
// use), puts dO's scaled columns tiles and the chain lanes' decays for the chain, and copies
// dS[chunk] and dUt out of the chain warps' staging blocks: the chain has no loads of its own in
// flight at its proxy fences, which wait for them (the forward pass, chunk_delta_row_forward.cuh,
// gained 437 -> 384 us from the same split at (2, 16384, 16, 128)). The warpgroup index comes
// through __shfl_sync (see the forward pass).
//
// Measured on the H200 at (2, 16384, 16, 128), ncu per call beside the one-warpgroup pass in the
// same run: 412 -> 367 us; the one-warpgroup pass without its copies out (its chain and loads, not
// a result) 355.
template <int kNk>
__global__ void __launch_bounds__(kRowBackwardThreads, 1)
    StateBackwardRowsKernel(const __grid_constant__ StepBase b) {
#ifdef FLAME_WGMMA_DEVICE
  using L = RowBackwardLayout<kNk>;
  using Set = typename L::Set;
  using DO = RowBackwardDO;
  constexpr int K = kNk * kBT;
  constexpr int kGroup = kRowBackwardThreads / 2;
  extern __shared__ float4 smem4[];
  char* at;
  const uint32_t at_s = AlignedSharedBase(smem4, &at);
  const ChunkDeltaParams& p = b.p;
  const int V = p.v_dim, H = p.heads;
  const int v0 = blockIdx.x * kRowFormCols, h = blockIdx.y, n = blockIdx.z;
  const int group = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / kGroup, 0);
  const int lane_id = threadIdx.x % kGroup, warp = lane_id / 32, warp_row = 16 * warp;
  // The chain warp's staging blocks of iteration parity buf: dS's rows 64 j + warp_row, dUt's.
  const auto chain_stage = [&](int buf) {
    const uint32_t off = L::kStages + buf * L::kStageSet + warp * L::kWarpStages;
    return WarpStage(at_s + off, at + off);
  };
  constexpr uint32_t kDUtStage = kNk * kWarpStageBytes;
  // The chain lane's decays of iteration parity buf.
  const auto decays = [&](int buf) {
    return reinterpret_cast<float4*>(at + L::kDO + buf * DO::kBytes + DO::kDecays) + lane_id;
  };
  const Seq seq = LocateSeq<kBT>(p, n);
  const SeqSources src(p, seq, h);
  const int64_t ld_k = int64_t{H} * K, ld_v = int64_t{H} * V;
  uint64_t* bars = reinterpret_cast<uint64_t*>(at + L::kBars);
  // (The copy engine always: this kernel runs only where b.tile_copies holds.)
  const auto bar = [&](int i) { return CopyBarrier(bars + i, true); };
  if (threadIdx.x < 2) bar(threadIdx.x).Init();
  __syncthreads();
  const int last = seq.num_chunks - 1;

  if (group == 1) {
    // The helper: per iteration it, dO's tiles and the decays of iteration it + 1 (loaded during
    // iteration it - 1), then the copies out of iteration it.
    const bf16* d_o0 = p.d_o + In(p.v_strides, seq.batch, seq.bos, h) + v0;
    uint32_t d_o_next[8];
    float G_next[3];
    const auto load_rows = [&](int ci) {  // dO's lane pairs, G at the lane's rows and the last
      const int rows = src.Rows(ci);
      GroupAcc32::LoadPairs(d_o_next, d_o0 + int64_t{ci} * kBT * p.v_strides.token,
                            p.v_strides.token, rows);
      if (b.gated) {
        const float* G_chunk = b.s.G + src.TokAt(ci, 1);
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          G_next[hh] = G_chunk[min(GroupAcc32::Row(hh), rows - 1) * H];
        }
        G_next[2] = G_chunk[(rows - 1) * H];
      }
    };
    // dO of iteration it (loaded into d_o_next) to its parity's tiles, the decays beside them.
    const auto put_d_o = [&](int it) {
      const int buf = it & 1;
      if (it >= 2) ptx::NamedBarrierSync(kDOFreeBar + buf, kRowBackwardThreads);
      const uint32_t tiles = at_s + L::kDO + buf * DO::kBytes;
      const ColumnsTile gamma_do_tile(tiles + DO::kGammaDO), scaled_do_tile(tiles + DO::kScaledDO);
      GroupAcc32 d_o;
      d_o.SetPairs(d_o_next);
      d_o.Scale(p.scale);
      uint32_t a[4];
      if (b.gated) {
#pragma unroll
        for (int c = 0; c < 2; ++c) d_o.Bf16A(c, a), scaled_do_tile.Put(0, c, a);
        d_o.ScaleRowPair(__expf(G_next[0]), __expf(G_next[1]));
        *decays(buf) = make_float4(__expf(G_next[2] - G_next[0]), __expf(G_next[2] - G_next[1]),
                                   __expf(G_next[2]), 0.0f);
      }
#pragma unroll
      for (int c = 0; c < 2; ++c) d_o.Bf16A(c, a), gamma_do_tile.Put(0, c, a);
      wgmma::FenceSharedForProducts();
      ptx::NamedBarrierArrive(kDOInBar + buf, kRowBackwardThreads);
    };
    if (last >= 0) {
      load_rows(last);
      put_d_o(0);
      if (last >= 1) load_rows(last - 1);
    }
    for (int it = 0; it <= last; ++it) {
      const int ci = last - it, buf = it & 1;
      if (it + 1 <= last) {
        put_d_o(it + 1);
        if (it + 2 <= last) load_rows(ci - 2);
      }
      ptx::NamedBarrierSync(kStagedBar + buf, kRowBackwardThreads);
      const WarpStage stage = chain_stage(buf);
      CopyOutState<kNk>(stage, b.s.dS + src.StateAt(ci, K * V) + int64_t{warp_row} * V + v0, V);
      stage.CopyOut(kDUtStage, b.s.dUt + src.TokAt(ci, V) + warp_row * ld_v + v0, ld_v,
                    src.Rows(ci) - warp_row);
      if (it + 2 <= last) ptx::NamedBarrierArrive(kStageFreeBar + buf, kRowBackwardThreads);
    }
    return;
  }

  // dS's chain.
  const auto issue = [&](int ci, int it) {  // chunk ci's tiles into set it % 2
    const uint32_t set = at_s + (it & 1) * Set::kBytes;
    const int rows = src.Rows(ci), row = src.RowAt(ci);
    const TileGroup tiles(bar(it & 1), Set::kTiles);
    tiles.Token(set + Set::kKeys, &b.maps.kn, 0, kNk, h, row, b.s.kn + src.TokAt(ci, K), ld_k,
                rows);
    tiles.Token(set + Set::kQueries, &b.maps.qn, 0, kNk, h, row, b.s.qn + src.TokAt(ci, K), ld_k,
                rows);
    tiles.Token(set + Set::kW, &b.maps.w, 0, kNk, h, row, b.s.W + src.TokAt(ci, K), ld_k, rows);
    tiles.Block(set + Set::kM, &b.maps.M, 0, src.MatRowAt(ci),
                b.s.M + Mat(p, seq.first_chunk + ci, h), kBT);
  };
  const uint64_t k_desc = wgmma::DescriptorSwizzle128(at_s + Set::kKeys);
  const uint64_t ds_desc = wgmma::DescriptorSwizzle128(at_s + L::kStateCopy);
  const uint64_t gamma_do_desc = wgmma::DescriptorSwizzle128(at_s + L::kDO + DO::kGammaDO);
  // scale dO: its own tile only where the decays are not 1.
  const uint64_t scaled_do_desc =
      wgmma::DescriptorSwizzle128(at_s + L::kDO + (b.gated ? DO::kScaledDO : DO::kGammaDO));
  const uint64_t dut_desc = wgmma::DescriptorSwizzle128(at_s + L::kDUt);
  constexpr uint64_t kDOStep = DO::kBytes / 16;
  const ColumnsTile state_tile(at_s + L::kStateCopy), dut_tile(at_s + L::kDUt);

  GroupAcc32 dS[kNk];  // rows 64 j + GroupAcc32::Row(h)
  const int64_t state_at = State(p, n, h) + v0;  // of the state gradients given and returned
#pragma unroll
  for (int j = 0; j < kNk; ++j) {
    dS[j].LoadState(p.d_final_state ? p.d_final_state + state_at + j * kBT * V : nullptr, V);
  }
  // dS's bf16 copy of iteration it into its columns tiles and its parity's stage, once the
  // helper has copied iteration it - 2's out: put at the end of the iteration before (the first
  // one before the loop), once its products are done.
  const auto put_state_copy = [&](int it) {
    if (it >= 2) ptx::NamedBarrierSync(kStageFreeBar + (it & 1), kRowBackwardThreads);
    PutStateCopy(dS, state_tile, chain_stage(it & 1));
  };
  if (last >= 0) {
    issue(last, 0);
    put_state_copy(0);
  }
  for (int it = 0; it <= last; ++it) {
    const int ci = last - it, rows = src.Rows(ci), buf = it & 1;
    const uint32_t set = buf * Set::kBytes;
    const uint64_t set_desc = set / 16, do_desc = buf * kDOStep;
    const WarpStage stage = chain_stage(buf);
    bar(buf).Wait(it >> 1);
    if (rows < kBT) {  // the garbage rows of the keys, the queries and W past the chunk's end
      ZeroRowsPast<kGroup>(reinterpret_cast<bf16*>(at + set + Set::kKeys), 3 * kNk, rows);
    }
    wgmma::FenceSharedForProducts();
    ptx::NamedBarrierSync(kBackChainBar, kGroup);  // this chunk's tiles and dS's copy are in
    if (ci > 0) issue(ci - 1, it + 1);

    // K dS and scale M^T dO (one group), then dS_j = gamma_L dS_j + Q_j^T dO' (another), once
    // the helper's dO tiles are in.
    uint32_t m_a[1][4][4], q_a[kNk][4][4];
    LoadTransposedA(m_a, at_s + set + Set::kM, warp_row);
    LoadTransposedA(q_a, at_s + set + Set::kQueries, warp_row);
    ptx::NamedBarrierSync(kDOInBar + buf, kRowBackwardThreads);
    const float4 decay = b.gated ? *decays(buf) : make_float4(1.0f, 1.0f, 1.0f, 0.0f);
    if (b.gated) {
#pragma unroll
      for (int j = 0; j < kNk; ++j) dS[j].Scale(decay.z);
    }
    GroupAcc32 kds, mtdo;  // set by their first steps
    wgmma::Fence();
    MultiplyStateCopy<kNk, false, false>(kds.d, k_desc + set_desc, ds_desc);
    wgmma::MmaRegA32<false, false>(mtdo.d, m_a[0][0], scaled_do_desc + do_desc);
#pragma unroll
    for (int s = 1; s < 4; ++s) {
      wgmma::MmaRegA32<false>(mtdo.d, m_a[0][s], scaled_do_desc + do_desc + 2 * s);
    }
    wgmma::Commit();
    AddTransposedProducts<kNk, false>(dS, q_a, gamma_do_desc + do_desc);
    wgmma::Commit();
    wgmma::Wait<1>();

    // dUt = diag(exp(G_L - G)) K dS + scale M^T dO, to its columns tile and the stage.
    if (b.gated) kds.ScaleRowPair(decay.x, decay.y);
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      uint32_t a[4];
#pragma unroll
      for (int e = 0; e < 8; ++e) kds.d[8 * c + e] += mtdo.d[8 * c + e];
      kds.Bf16A(c, a);
      dut_tile.Put(0, c, a);
      stage.Put(kDUtStage, c, a);
    }
    uint32_t w_a[kNk][4][4];
    LoadTransposedA(w_a, at_s + set + Set::kW, warp_row);
    wgmma::FenceSharedForProducts();
    ptx::NamedBarrierArrive(kStagedBar + buf, kRowBackwardThreads);
    ptx::NamedBarrierSync(kBackChainBar, kGroup);  // dUt's tile is in

    // dS_j -= W_j^T dUt.
    wgmma::Fence();
    AddTransposedProducts<kNk, true>(dS, w_a, dut_desc);
    wgmma::Commit();
    wgmma::Wait<0>();
    // The helper may refill this parity's dO tiles (for iteration it + 2).
    if (it + 2 <= last) ptx::NamedBarrierArrive(kDOFreeBar + buf, kRowBackwardThreads);
    if (it < last) put_state_copy(it + 1);
  }
  if (p.d_initial_state) {
#pragma unroll
    for (int j = 0; j < kNk; ++j) dS[j].StoreState(p.d_initial_state + state_at + j * kBT * V, V);
  }
#else
  __trap();  // launched only where the binary has sm_90a code (FLAME_KERNELS_SM90A)
#endif
}

inline size_t StateBackwardRowsSmem(int k_dim) {
  return kSwizzleAlign +
         (k_dim == kBT ? RowBackwardLayout<1>::kBytes : RowBackwardLayout<2>::kBytes);
}

// The pass's instantiations for K = 64 nk, nk = 1 or 2 (the launcher takes it only there).
inline void (*StateBackwardRowsFor(int nk))(StepBase) {
  return nk == 1 ? StateBackwardRowsKernel<1> : StateBackwardRowsKernel<2>;
}

}  // namespace flame::kernels::delta_chunk::tiles
