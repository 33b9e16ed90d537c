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

// One chunk's tiles of the row-form backward pass: the keys, the queries and W (kNk swizzled
// tiles each; the three adjacent, for the zeroing past a chunk's end) and M; 1024-byte aligned.
template <int kNk>
struct RowBackwardSet {
  static constexpr int kKeys = 0, kQueries = kNk * kSwizzledTileBytes;
  static constexpr int kW = 2 * kNk * kSwizzledTileBytes, kM = 3 * kNk * kSwizzledTileBytes;
  static constexpr int kBytes = AlignSwizzled(kM + kSwizzledTileBytes);
  static constexpr int kTiles = 3 * kNk + 1;
};

// Shared memory: two tile sets; the columns tiles (chunk_delta_rows.cuh) of dS's bf16 copy (kNk),
// of scale diag(gamma) dO, of scale dO (where the decays are not 1) and of dUt; each warp's staging
// blocks (dS's kNk, dUt's); the copy barriers.
template <int kNk>
struct RowBackwardLayout {
  using Set = RowBackwardSet<kNk>;
  static constexpr int kStateCopy = 2 * Set::kBytes;
  static constexpr int kGammaDO = kStateCopy + kNk * kColumnsTileBytes;
  static constexpr int kScaledDO = kGammaDO + kColumnsTileBytes;
  static constexpr int kDUt = kScaledDO + kColumnsTileBytes;
  static constexpr int kStages = kDUt + kColumnsTileBytes;
  static constexpr int kWarpStages = (kNk + 1) * kWarpStageBytes;  // a warp's
  static constexpr int kBars = kStages + 4 * kWarpStages;
  static constexpr int kBytes = kBars + kCopyBarrierBytes;
};

// Per chunk, in reverse, with dS the gradient of the state leaving the chunk (the mma.sync pass's
// formulas, StateBackwardKernel, with M^T dO formed here):
//   dS[chunk] = dS;  dUt = diag(exp(G_L - G)) K dS + scale M^T dO;
//   dS = gamma_L dS + Q^T (scale diag(gamma) dO) - W^T dUt.
// One block (a warpgroup) per (32 value columns, head, sequence). After the swap of the tile sets
// and the copies of dS and of the two scaled dO (one barrier), in two groups of products:
//   K dS (K / 16 steps of 64 x 32 x 16, A = the key tiles) and M^T dO (4 steps, A = M's transposed
//   fragments), which dUt waits for;
//   dS_j = gamma_L dS_j + Q_j^T (scale diag(gamma) dO) (4 steps per 64-row slice j, A = the
//   queries' transposed fragments), which nothing waits for until the chunk's end;
// and after dUt's copy (the second barrier), dS_j -= W_j^T dUt (4 steps each). dO and the gate's
// G come straight to the registers a chunk ahead; dS[chunk] and dUt leave through each warp's
// staging blocks while products run.
template <int kNk>
__global__ void __launch_bounds__(kRowFormThreads, 1)
    StateBackwardRowsKernel(const __grid_constant__ StepBase b) {
#ifdef FLAME_WGMMA_DEVICE
  using L = RowBackwardLayout<kNk>;
  using Set = typename L::Set;
  constexpr int K = kNk * kBT;
  extern __shared__ float4 smem4[];
  char* at;
  const uint32_t at_s = AlignedSharedBase(smem4, &at);
  const ChunkDeltaParams& p = b.p;
  const int V = p.v_dim, H = p.heads;
  const int v0 = blockIdx.x * kRowFormCols, h = blockIdx.y, n = blockIdx.z;
  const int warp_row = 16 * (threadIdx.x / 32);
  const uint32_t stage_off = L::kStages + threadIdx.x / 32 * L::kWarpStages;
  const WarpStage stage(at_s + stage_off, at + stage_off);  // dS's rows 64 j + warp_row, dUt's
  constexpr uint32_t kDUtStage = kNk * kWarpStageBytes;
  const Seq seq = LocateSeq<kBT>(p, n);
  const SeqSources src(p, seq, h);
  const int64_t ld_k = int64_t{H} * K, ld_v = int64_t{H} * V;
  uint64_t* bars = reinterpret_cast<uint64_t*>(at + L::kBars);
  // (The copy engine always: this kernel runs only where b.tile_copies holds.)
  const auto bar = [&](int i) { return CopyBarrier(bars + i, true); };
  if (threadIdx.x < 2) bar(threadIdx.x).Init();
  __syncthreads();
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
  // dO's lane pairs and the lane's G (its two rows, clamped to the chunk, and the last row's),
  // a chunk ahead.
  const bf16* d_o0 = p.d_o + In(p.v_strides, seq.batch, seq.bos, h) + v0;
  const auto load_rows = [&](int ci, uint32_t(&d_o)[8], float(&G)[3]) {
    const int rows = src.Rows(ci);
    GroupAcc32::LoadPairs(d_o, d_o0 + int64_t{ci} * kBT * p.v_strides.token, p.v_strides.token,
                          rows);
    const float* G_chunk = b.s.G + src.TokAt(ci, 1);
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) G[hh] = G_chunk[min(GroupAcc32::Row(hh), rows - 1) * H];
    G[2] = G_chunk[(rows - 1) * H];
  };
  const uint64_t k_desc = wgmma::DescriptorSwizzle128(at_s + Set::kKeys);
  const uint64_t ds_desc = wgmma::DescriptorSwizzle128(at_s + L::kStateCopy);
  const uint64_t gamma_do_desc = wgmma::DescriptorSwizzle128(at_s + L::kGammaDO);
  // scale dO: its own tile only where the decays are not 1.
  const uint32_t scaled_do_at = at_s + (b.gated ? L::kScaledDO : L::kGammaDO);
  const uint64_t scaled_do_desc = wgmma::DescriptorSwizzle128(scaled_do_at);
  const uint64_t dut_desc = wgmma::DescriptorSwizzle128(at_s + L::kDUt);
  const ColumnsTile state_tile(at_s + L::kStateCopy), gamma_do_tile(at_s + L::kGammaDO),
      scaled_do_tile(scaled_do_at), dut_tile(at_s + L::kDUt);

  GroupAcc32 dS[kNk];  // rows 64 j + GroupAcc32::Row(h)
  const int64_t state_at = State(p, n, h) + v0;  // of the state gradients given and returned
#pragma unroll
  for (int j = 0; j < kNk; ++j) {
    dS[j].LoadState(p.d_final_state ? p.d_final_state + state_at + j * kBT * V : nullptr, V);
  }
  const int last = seq.num_chunks - 1;
  uint32_t d_o_next[8];
  float G_next[3];
  if (last >= 0) {
    issue(last, 0);
    load_rows(last, d_o_next, G_next);
  }
  for (int it = 0; it <= last; ++it) {
    const int ci = last - it, rows = src.Rows(ci);
    const uint32_t set = (it & 1) * Set::kBytes;
    const uint64_t set_desc = set / 16;
    float G[3];
#pragma unroll
    for (int i = 0; i < 3; ++i) G[i] = G_next[i];
    // dS's bf16 copy (the products before read the last one; their waits are behind), and dO
    // scaled, by gamma for the queries' product, as is (but for the scale) for M^T dO.
    __syncwarp();  // the dS stage's reads of the chunk before are done
    PutStateCopy(dS, state_tile, stage);
    {
      GroupAcc32 d_o;
      d_o.SetPairs(d_o_next);
      d_o.Scale(p.scale);
      uint32_t a[4];
      if (b.gated) {
#pragma unroll
        for (int c = 0; c < 2; ++c) d_o.Bf16A(c, a), scaled_do_tile.Put(0, c, a);
        d_o.ScaleRowPair(__expf(G[0]), __expf(G[1]));
      }
#pragma unroll
      for (int c = 0; c < 2; ++c) d_o.Bf16A(c, a), gamma_do_tile.Put(0, c, a);
    }
    bar(it & 1).Wait(it >> 1);
    if (rows < kBT) {  // the garbage rows of the keys, the queries and W past the chunk's end
      ZeroRowsPast<kRowFormThreads>(reinterpret_cast<bf16*>(at + set + Set::kKeys), 3 * kNk, rows);
    }
    wgmma::FenceSharedForProducts();
    __syncthreads();  // this chunk's tiles and the copies are in; the other set is free
    if (ci > 0) {
      issue(ci - 1, it + 1);
      load_rows(ci - 1, d_o_next, G_next);
    }

    // K dS and scale M^T dO (one group), then dS_j = gamma_L dS_j + Q_j^T dO' (another).
    uint32_t m_a[1][4][4], q_a[kNk][4][4];
    LoadTransposedA(m_a, at_s + set + Set::kM, warp_row);
    LoadTransposedA(q_a, at_s + set + Set::kQueries, warp_row);
    const float gamma_last = b.gated ? __expf(G[2]) : 1.0f;
    if (b.gated) {
#pragma unroll
      for (int j = 0; j < kNk; ++j) dS[j].Scale(gamma_last);
    }
    GroupAcc32 kds, mtdo;  // set by their first steps
    wgmma::Fence();
    MultiplyStateCopy<kNk, false, false>(kds.d, k_desc + set_desc, ds_desc);
    wgmma::MmaRegA32<false, false>(mtdo.d, m_a[0][0], scaled_do_desc);
#pragma unroll
    for (int s = 1; s < 4; ++s) {
      wgmma::MmaRegA32<false>(mtdo.d, m_a[0][s], scaled_do_desc + 2 * s);
    }
    wgmma::Commit();
    AddTransposedProducts<kNk, false>(dS, q_a, gamma_do_desc);
    wgmma::Commit();
    // dS[chunk] (bf16) to the scratch while the products run.
    __syncwarp();
    bf16* ds_dst = b.s.dS + src.StateAt(ci, K * V) + int64_t{warp_row} * V + v0;
    CopyOutState<kNk>(stage, ds_dst, V);
    wgmma::Wait<1>();

    // dUt = diag(exp(G_L - G)) K dS + scale M^T dO, to its columns tile and the stage.
    if (b.gated) {
      kds.ScaleRowPair(__expf(G[2] - G[0]), __expf(G[2] - G[1]));
    }
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
    __syncthreads();  // dUt's tile is in

    // dS_j -= W_j^T dUt.
    wgmma::Fence();
    AddTransposedProducts<kNk, true>(dS, w_a, dut_desc);
    wgmma::Commit();
    __syncwarp();
    stage.CopyOut(kDUtStage, b.s.dUt + src.TokAt(ci, V) + warp_row * ld_v + v0, ld_v,
                  rows - warp_row);
    wgmma::Wait<0>();
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
