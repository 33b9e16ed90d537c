// The backward state pass of the chunked delta rule in column form on warpgroup products
// (sm_90a; chunk_delta_columns.cuh says what the column form is and why). Per chunk, in reverse,
// with dS the gradient of the state leaving the chunk:
//   dS[chunk] = dS;  dUt = diag(exp(G_L - G)) K dS + MtdO;
//   dS = gamma_L dS + Q^T (scale diag(gamma) dO) - W^T dUt,
// MtdO = scale M^T dO the chunk-local part. In the warps' transposed form:
//   dUt^T = (dS^T K^T) diag(exp(G_L - G)) + scale dO^T M:  K / 16 steps of 64 x 64 x 16, B = the
//           keys (K-major), A = dS^T's bf16 copy in registers; then 4 steps of 64 x 64 x 16 onto
//           the same accumulators (held divided by scale until then), B = M (N-major), A = dO^T
//           read from the chunk's dO tile;
//   dS^T  = gamma_L dS^T + dO'^T Q - dUt^T W:  4 + 4 steps of 64 x K x 16, B = the queries and W
//           (N-major), A = dO'^T = (scale diag(gamma) dO)^T (dO^T's fragments scaled), and dUt^T's
//           bf16 copy negated.
// (The mma.sync pass takes MtdO from LocalValueGradsKernel, for all chunks at once, unless its
// grid fits one wave and its variant that forms MtdO runs. Here,
// loaded so, it cost the pass 32 loads a lane per chunk and LocalValueGrads 197 us per call at
// (1, 8192, 96, 128).) One block barrier per chunk (the swap of the tile sets) and two warpgroup
// barriers (the staged stores of dS's copy and dUt).
// kFormM (the ungated rule's pass, b.gated false): each warpgroup forms M itself (FormChunkMat)
// into a tile of its own, its product issued before dS^T K^T's, and M's tile put before the first
// group barrier; scale dO^T M then has accumulators of its own, running beside dS's copy, and
// joins dS^T K^T's once both are in (dUt^T = dS^T K^T + scale dO^T M).
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/ptx.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/delta_rule/chunk_delta_columns.cuh"
#include "kernels/delta_rule/chunk_delta_state_pass.cuh"  // SeqSources

namespace flame::kernels::delta_chunk::tiles {

template <int kNk, int kGroups, bool kFormM = false>
__global__ void __launch_bounds__(128 * kGroups)
    StateBackwardWgmmaKernel(const __grid_constant__ StepBase b) {
#ifdef FLAME_WGMMA_DEVICE
  constexpr int K = kNk * kBT, kBV = 64 * kGroups, kThreadsB = 128 * kGroups;
  using Set = ColumnTileSet<K, kBV, 3, kFormM ? 0 : 1>;  // the keys, the queries, W; dO; (M)
  const bool gated = !kFormM && b.gated;
  extern __shared__ float4 smem4[];
  char* sets;
  const uint32_t sets_at = AlignedSharedBase(smem4, &sets);
  const ChunkDeltaParams& p = b.p;
  const int V = p.v_dim, H = p.heads;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, group = warp / 4;
  // After the sets, each group's M tile (kFormM; 1024-byte aligned, as the sets are), then its
  // staging tiles: dS's copy (K rows), then dUt (64).
  constexpr int kMatBytes = kFormM ? kGroups * kSwizzledTileBytes : 0;
  const uint32_t m_tile = sets_at + 2 * Set::kBytes + group * kSwizzledTileBytes;  // (kFormM)
  char* stages = sets + 2 * Set::kBytes + kMatBytes +
                 group * (GroupStage<K>::kBytes + GroupStage<kBT>::kBytes);
  const GroupStage<K> ds_stage(reinterpret_cast<bf16*>(stages));
  const GroupStage<kBT> dut_stage(reinterpret_cast<bf16*>(stages + GroupStage<K>::kBytes));
  const int v0 = blockIdx.x * kBV, h = blockIdx.y, n = blockIdx.z;
  const int vw = v0 + 16 * warp, vg = v0 + 64 * group;
  const Seq seq = LocateSeq<kBT>(p, n);
  const SeqSources src(p, seq, h);
  const int last = seq.num_chunks - 1;
  const int64_t ld_k = int64_t{H} * K, ld_v = int64_t{H} * V;
  // The last chunk's sources and destinations; each chunk before moves them back by a step.
  const bf16* k_src = b.s.kn + src.TokAt(last, K);
  const bf16* q_src = b.s.qn + src.TokAt(last, K);
  const bf16* w_src = b.s.W + src.TokAt(last, K);
  const bf16* o_src =
      p.d_o + In(p.v_strides, seq.batch, seq.bos, h) + v0 + int64_t{last} * kBT * p.v_strides.token;
  const float* G_src = b.s.G + src.TokAt(last, 1);
  const bf16* m_src = b.s.M + Mat(p, seq.first_chunk + last, h);
  const int t = lane % 4;
  bf16* dut_dst = GroupStage<kBT>::ThreadDst(b.s.dUt + src.TokAt(last, V) + vg, ld_v);
  bf16* ds_dst = GroupStage<K>::ThreadDst(b.s.dS + src.StateAt(last, K * V) + vg, V);
  const int64_t tok_step_k = kBT * ld_k, tok_step_v = kBT * ld_v;
  const int64_t state_step = int64_t{H} * K * V, o_step = kBT * p.v_strides.token;

  // The sets' copy barriers (chunk_delta_swizzled.cuh), after the staging tiles.
  uint64_t* bars =
      reinterpret_cast<uint64_t*>(sets + 2 * Set::kBytes + kMatBytes +
                                  kGroups * (GroupStage<K>::kBytes + GroupStage<kBT>::kBytes));
  // (The copy engine always: this kernel runs only where b.tile_copies holds.)
  const auto bar = [&](int i) { return CopyBarrier(bars + i, true); };
  if (threadIdx.x < 2) bar(threadIdx.x).Init();
  __syncthreads();
  const RowPieces<kThreadsB, kBV / 8> o_pieces(p.v_strides.token, sets + Set::kValues,
                                               Set::kLdValues * 2);
  const auto issue = [&](int it, int ci) {  // chunk ci's tiles into set it % 2
    const uint32_t set = (it & 1) * Set::kBytes;
    const int rows = src.Rows(ci), row = src.RowAt(ci);
    const auto key = [&](int i) { return sets_at + set + Set::Key(i); };
    const TileGroup tiles(bar(it & 1), Set::kTiles);
    tiles.Token(key(0), &b.maps.kn, 0, kNk, h, row, k_src, ld_k, rows);
    tiles.Token(key(1), &b.maps.qn, 0, kNk, h, row, q_src, ld_k, rows);
    tiles.Token(key(2), &b.maps.w, 0, kNk, h, row, w_src, ld_k, rows);
    o_pieces.Issue(o_src, set, rows);
    IssueChunkG(reinterpret_cast<float*>(sets + set + Set::kG), G_src, H, rows);
    if (!kFormM) tiles.Block(sets_at + set + Set::kMat, &b.maps.M, 0, src.MatRowAt(ci), m_src, kBT);
  };

  // dO^T as an A operand of the warp's columns (transposed ldmatrix of dO's rows); the lane's G
  // pairs; the products' descriptors (set 0; set 1's start Set::kBytes on).
  const uint32_t o_at =
      sets_at + Set::kValues +
      2 * ((lane % 8 + lane / 16 * 8) * Set::kLdValues + lane / 8 % 2 * 8 + 16 * warp);
  const uint32_t G_at = sets_at + Set::kG + 8 * t;
  const uint64_t k_desc = wgmma::DescriptorSwizzle128(sets_at);
  const uint64_t q_desc = wgmma::DescriptorSwizzle128(sets_at + Set::Key(1), kSwizzledTileBytes);
  const uint64_t w_desc = wgmma::DescriptorSwizzle128(sets_at + Set::Key(2), kSwizzledTileBytes);
  // M's tile: the set's where read, the group's where formed (from the queries as A and the keys as
  // K-major B).
  const uint64_t m_desc = wgmma::DescriptorSwizzle128(kFormM ? m_tile : sets_at + Set::kMat);
  const uint64_t qa_desc = wgmma::DescriptorSwizzle128(sets_at + Set::Key(1));
  const uint64_t kk_desc = wgmma::DescriptorSwizzle128(sets_at);
  const float rcp_scale = 1.0f / p.scale;

  WarpRows<K> dS;  // dS^T of the warp's 16 columns
  if (p.d_final_state) {
    const float* fin = p.d_final_state + State(p, n, h) + vw;
    WarpRows<K>::ForTransposed(V, [&](int i, int e, int64_t at) { dS.x[i][e] = fin[at]; });
  } else {
    dS.Zero();
  }
  if (last >= 0) issue(0, last);
  __pipeline_commit();
  for (int it = 0; it <= last; ++it) {
    const int ci = last - it, rows = src.Rows(ci);
    const uint32_t set = (it & 1) * Set::kBytes;
    const uint64_t set_desc = set / 16;
    bar(it & 1).Wait(it >> 1);
    if (rows < kBT) {  // the garbage rows of K dS and of the update
      ZeroRowsPast<kThreadsB>(reinterpret_cast<bf16*>(sets + set), 3 * kNk, rows);
    }
    __pipeline_wait_prior(0);
    wgmma::FenceSharedForProducts();
    __syncthreads();  // this chunk's tiles are in; every warp is done with the other set
    if (ci > 0) {
      k_src -= tok_step_k, q_src -= tok_step_k, w_src -= tok_step_k, o_src -= o_step;
      G_src -= kBT * H;
      if (!kFormM) m_src -= int64_t{kBT} * kBT * H;
      issue(it + 1, ci - 1);
    }
    __pipeline_commit();

    GroupAcc64 m;  // (kFormM) M
    if (kFormM) FormChunkMat<K>(m, qa_desc + set_desc, kk_desc + set_desc);
    // dS^T K^T, dS's bf16 copy stored as dS[chunk] while it multiplies.
    WarpRows<kBT> du;
    du.Zero();
    float(&du_d)[kBT / 2] = reinterpret_cast<float(&)[kBT / 2]>(du.x);
    MultiplyStateCopy(dS, ds_stage, [&](int k, const uint32_t(&a)[4]) {
      wgmma::MmaRegA<kBT, false, false>(du_d, a, k_desc + set_desc + KMajorStep(k));
    });
    uint32_t o_a[kBT / 16][4];  // dO^T
#pragma unroll
    for (int s = 0; s < kBT / 16; ++s) {
      ptx::LoadMatrix4Trans(o_a[s], o_at + set + 2 * s * 16 * Set::kLdValues);
    }
    WarpRows<kBT> mt;  // (kFormM) dO^T M
    float(&mt_d)[kBT / 2] = reinterpret_cast<float(&)[kBT / 2]>(mt.x);
    if (kFormM) {
      mt.Zero();
      wgmma::Wait<1>();  // M's product (committed first; dS^T K^T's last group may run)
      PutChunkMat(m, m_tile, rows);
    }
    GroupBarrier(group);
    if (kFormM) {
      wgmma::Fence();
#pragma unroll
      for (int s = 0; s < kBT / 16; ++s) {
        wgmma::MmaRegA<kBT, false, true>(mt_d, o_a[s], m_desc + NMajorStep(s));
      }
      wgmma::Commit();
    }
    ds_stage.CopyOut(ds_dst, V, K);
    wgmma::Wait<0>();
    // dUt^T = (dS^T K^T) diag(exp(G_L - G)) + scale dO^T M: with kFormM the two products'
    // accumulators summed; else dO^T M's product onto the first's, held divided by scale until it
    // is in (dO^T's bf16 fragments stay exact).
    const float* G = reinterpret_cast<const float*>(sets + set + Set::kG);
    const float G_last = G[rows - 1];
    uint32_t og_a[kBT / 16][4];
    if (kFormM) {
#pragma unroll
      for (int i = 0; i < WarpRows<kBT>::kTiles; ++i) {
#pragma unroll
        for (int e = 0; e < 4; ++e) du.x[i][e] = fmaf(p.scale, mt.x[i][e], du.x[i][e]);
      }
      ScaleOutputGradFragments<false>(o_a, og_a, G_at + set, b);
    } else {
      if (gated) {
        DecayTokens(du, G_at + set, G_last, rcp_scale);
      } else {
        du.Scale(rcp_scale);
      }
      wgmma::Fence();
#pragma unroll
      for (int s = 0; s < kBT / 16; ++s) {
        wgmma::MmaRegA<kBT, false, true>(du_d, o_a[s], m_desc + set_desc + NMajorStep(s));
      }
      wgmma::Commit();
      // Meanwhile dO'^T = (scale diag(gamma) dO)^T from dO^T's fragments, rounded to bf16 again.
      ScaleOutputGradFragments(o_a, og_a, G_at + set, b);
      wgmma::Wait<0>();
      du.Scale(p.scale);
    }
    // dUt^T; its bf16 copy to the scratch (staged) and, negated, the A operand of W's product.
    uint32_t du_a[kBT / 16][4];
#pragma unroll
    for (int s = 0; s < kBT / 16; ++s) {
      du.Bf16A(s, du_a[s]);
      dut_stage.Put(s, du_a[s]);
    }
    // dS^T = gamma_L dS^T + dO'^T Q - dUt^T W, with dUt's stores running meanwhile.
    if (gated) dS.Scale(expf(G_last));
    float(&ds_d)[K / 2] = reinterpret_cast<float(&)[K / 2]>(dS.x);
    wgmma::Fence();
#pragma unroll
    for (int s = 0; s < kBT / 16; ++s) {
      wgmma::MmaRegA<K, false, true>(ds_d, og_a[s], q_desc + set_desc + NMajorStep(s));
    }
#pragma unroll
    for (int s = 0; s < kBT / 16; ++s) {
      wgmma::MmaRegA<K, true, true>(ds_d, du_a[s], w_desc + set_desc + NMajorStep(s));
    }
    wgmma::Commit();
    GroupBarrier(group);
    dut_stage.CopyOut(dut_dst, ld_v, rows);
    dut_dst -= tok_step_v, ds_dst -= state_step;
    wgmma::Wait<0>();
  }
  if (p.d_initial_state) {
    float* d_init = p.d_initial_state + State(p, n, h) + vw;
    WarpRows<K>::ForTransposed(V, [&](int i, int e, int64_t at) { d_init[at] = dS.x[i][e]; });
  }
#else
  __trap();  // launched only where the binary has sm_90a code (FLAME_KERNELS_SM90A)
#endif
}

// Shared memory: the column pass's with three key tiles, and M's tile in each set or, with
// kFormM, each warpgroup's (the same bytes with two groups).
template <int K, int kBV, bool kFormM>
inline constexpr size_t StateBackwardWgmmaSmemFor() {
  return kFormM ? ColumnPassSmem<K, kBV, 3>() + kBV / 64 * size_t{kSwizzledTileBytes}
                : ColumnPassSmem<K, kBV, 3, 1>();
}
template <bool kFormM = false>
inline size_t StateBackwardWgmmaSmem(int k_dim, int groups) {
  if (k_dim == kBT) {
    return groups == 1 ? StateBackwardWgmmaSmemFor<kBT, 64, kFormM>()
                       : StateBackwardWgmmaSmemFor<kBT, 128, kFormM>();
  }
  return groups == 1 ? StateBackwardWgmmaSmemFor<2 * kBT, 64, kFormM>()
                     : StateBackwardWgmmaSmemFor<2 * kBT, 128, kFormM>();
}

// The pass's instantiations for K = 64 nk, nk = 1 or 2 (the launcher takes it only there).
template <int kGroups, bool kFormM = false>
inline void (*StateBackwardWgmmaFor(int nk))(StepBase) {
  return nk == 1 ? StateBackwardWgmmaKernel<1, kGroups, kFormM>
                 : StateBackwardWgmmaKernel<2, kGroups, kFormM>;
}

}  // namespace flame::kernels::delta_chunk::tiles
