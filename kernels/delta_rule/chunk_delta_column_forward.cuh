// The forward state pass of the chunked delta rule in column form on warpgroup products
// (sm_90a; chunk_delta_columns.cuh says what the column form is and why).
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

// Per chunk, in order: S[chunk] = S;  Ut = U - W S;  S = gamma_L S + K^T (diag(exp(G_L - G)) Ut).
// One block per (kBV = 64 kGroups value columns, head, sequence); each warpgroup holds 64 columns
// of S^T (warp w of the group: 16 of them, as WarpRows<K>) and multiplies on warpgroup products
// with its A operands in registers:
//   Ut^T = U^T - S^T W^T:       K / 16 steps of 64 x 64 x 16, B = W (K-major), A negated;
//   S^T  = gamma_L S^T + Ut'^T K:  4 steps of 64 x K x 16, B = the keys (N-major).
// W S's A fragments go in groups of four k steps (MultiplyStateCopy), and to the staging tile,
// whose copy to the scratch (S[chunk]) runs while the last group multiplies. A chunk's Ut goes out
// (staged likewise) while the keys' product runs.
// kOutput: the pass also writes the output, o = scale [diag(gamma) Q S + M Ut] (OutputKernel's,
// which then does not run), from the same registers, in the warps' transposed form:
//   o^T = scale [(S^T Q^T) diag(gamma) + Ut^T M^T]:  K / 16 steps of 64 x 64 x 16 beside W S's
//         (the same A fragments; B = the queries, K-major), then 4 steps of 64 x 64 x 16 beside
//         the keys' product (A = Ut^T's bf16 copy; B = M, K-major),
// staged and stored as Ut is. (As a kernel of its own, which reads S and Ut back: 312 us per call
// at (1, 8192, 96, 128).)
// kFormM (with kOutput; the ungated rule's pass, b.gated false): each warpgroup forms M itself
// (FormChunkMat) into a tile of its own instead of reading M with the chunk's tiles: M's product
// issued after the state's update, o's product by M once M's tile is put.
template <int kNk, int kGroups, bool kOutput, bool kFormM = false>
__global__ void __launch_bounds__(128 * kGroups)
    StateForwardWgmmaKernel(const __grid_constant__ StepBase b) {
#ifdef FLAME_WGMMA_DEVICE
  static_assert(kOutput || !kFormM, "M serves o only");
  constexpr int K = kNk * kBT, kBV = 64 * kGroups, kThreadsB = 128 * kGroups;
  constexpr bool kReadM = kOutput && !kFormM;
  const bool gated = !kFormM && b.gated;
  // The keys, W (and the queries); U; (M).
  using Set = ColumnTileSet<K, kBV, kOutput ? 3 : 2, kReadM ? 1 : 0>;
  extern __shared__ float4 smem4[];
  char* sets;
  const uint32_t sets_at = AlignedSharedBase(smem4, &sets);
  const ChunkDeltaParams& p = b.p;
  const int V = p.v_dim, H = p.heads;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int group = warp / 4;
  // After the sets, each group's M tile (kFormM; 1024-byte aligned, as the sets are), then its
  // staging tiles: S's copy (K rows), then Ut (64), and o (64).
  constexpr int kMatBytes = kFormM ? kGroups * kSwizzledTileBytes : 0;
  constexpr int kStageBytes = GroupStage<K>::kBytes + (kOutput ? 2 : 1) * GroupStage<kBT>::kBytes;
  const uint32_t m_tile = sets_at + 2 * Set::kBytes + group * kSwizzledTileBytes;  // (kFormM)
  char* stages = sets + 2 * Set::kBytes + kMatBytes + group * kStageBytes;
  const GroupStage<K> s_stage(reinterpret_cast<bf16*>(stages));
  const GroupStage<kBT> ut_stage(reinterpret_cast<bf16*>(stages + GroupStage<K>::kBytes));
  const GroupStage<kBT> o_stage(
      reinterpret_cast<bf16*>(stages + GroupStage<K>::kBytes + GroupStage<kBT>::kBytes));
  const int v0 = blockIdx.x * kBV, h = blockIdx.y, n = blockIdx.z;
  const int vw = v0 + 16 * warp;        // the warp's first value column
  const int vg = v0 + 64 * (warp / 4);  // the warpgroup's
  const Seq seq = LocateSeq<kBT>(p, n);
  const SeqSources src(p, seq, h);
  const int64_t ld_k = int64_t{H} * K, ld_v = int64_t{H} * V;
  // Chunk 0's sources and destinations; each chunk moves them by a fixed step.
  const bf16* k_src = b.s.kn + src.TokAt(0, K);
  const bf16* w_src = b.s.W + src.TokAt(0, K);
  const bf16* u_src = b.s.U + src.TokAt(0, V) + v0;
  const float* G_src = b.s.G + src.TokAt(0, 1);
  const bf16* q_src = b.s.qn + src.TokAt(0, K);
  const bf16* m_src = b.s.M + Mat(p, seq.first_chunk, h);
  bf16* ut_dst = GroupStage<kBT>::ThreadDst(b.s.Ut + src.TokAt(0, V) + vg, ld_v);
  bf16* o_dst = kOutput ? GroupStage<kBT>::ThreadDst(
                              p.o + In(p.v_strides, seq.batch, seq.bos, h) + vg, p.v_strides.token)
                        : nullptr;
  const int64_t o_step = kBT * p.v_strides.token;
  bf16* s_dst = GroupStage<K>::ThreadDst(b.s.S + src.StateAt(0, K * V) + vg, V);
  const int64_t tok_step_k = kBT * ld_k, tok_step_v = kBT * ld_v;
  const int64_t state_step = int64_t{H} * K * V;

  // The sets' copy barriers (chunk_delta_swizzled.cuh), after the staging tiles.
  uint64_t* bars =
      reinterpret_cast<uint64_t*>(sets + 2 * Set::kBytes + kMatBytes + kGroups * kStageBytes);
  // (The copy engine always: this kernel runs only where b.tile_copies holds.)
  const auto bar = [&](int i) { return CopyBarrier(bars + i, true); };
  if (threadIdx.x < 2) bar(threadIdx.x).Init();
  __syncthreads();
  const RowPieces<kThreadsB, kBV / 8> u_pieces(ld_v, sets + Set::kValues, Set::kLdValues * 2);
  const auto issue = [&](int ci) {  // chunk ci's tiles, from the sources' current chunk
    const uint32_t set = (ci & 1) * Set::kBytes;
    const int rows = src.Rows(ci), row = src.RowAt(ci);
    const auto key = [&](int i) { return sets_at + set + Set::Key(i); };
    const TileGroup tiles(bar(ci & 1), Set::kTiles);
    tiles.Token(key(0), &b.maps.kn, 0, kNk, h, row, k_src, ld_k, rows);
    tiles.Token(key(1), &b.maps.w, 0, kNk, h, row, w_src, ld_k, rows);
    u_pieces.Issue(u_src, set, rows);
    IssueChunkG(reinterpret_cast<float*>(sets + set + Set::kG), G_src, H, rows);
    if (kOutput) tiles.Token(key(2), &b.maps.qn, 0, kNk, h, row, q_src, ld_k, rows);
    if (kReadM) tiles.Block(sets_at + set + Set::kMat, &b.maps.M, 0, src.MatRowAt(ci), m_src, kBT);
  };

  // U^T as an A operand of the warp's columns (transposed ldmatrix of U's rows), and the lane's
  // G pairs; the products' descriptors (set 0; set 1's start Set::kBytes on).
  const uint32_t u_at =
      sets_at + Set::kValues +
      2 * ((lane % 8 + lane / 16 * 8) * Set::kLdValues + lane / 8 % 2 * 8 + 16 * warp);
  const uint32_t G_at = sets_at + Set::kG + 8 * (lane % 4);
  const uint64_t w_desc = wgmma::DescriptorSwizzle128(sets_at + Set::Key(1));
  const uint64_t k_desc = wgmma::DescriptorSwizzle128(sets_at, kSwizzledTileBytes);
  // (q_desc and m_desc serve kOutput only, the keys' K-major kk_desc kFormM; M's tile is the set's
  // where read, the group's where formed.)
  const uint64_t q_desc = wgmma::DescriptorSwizzle128(sets_at + Set::Key(kOutput ? 2 : 0));
  const uint64_t kk_desc = wgmma::DescriptorSwizzle128(sets_at);
  const uint64_t m_desc = wgmma::DescriptorSwizzle128(kFormM ? m_tile : sets_at + Set::kMat);

  WarpRows<K> S;  // S^T of the warp's 16 columns
  if (p.initial_state) {
    const float* init = p.initial_state + State(p, n, h) + vw;
    WarpRows<K>::ForTransposed(V, [&](int i, int e, int64_t at) { S.x[i][e] = init[at]; });
  } else {
    S.Zero();
  }
  if (seq.num_chunks > 0) issue(0);
  __pipeline_commit();
  for (int ci = 0; ci < seq.num_chunks; ++ci) {
    const int rows = src.Rows(ci);
    const uint32_t set = (ci & 1) * Set::kBytes;
    const uint64_t set_desc = set / 16;
    bar(ci & 1).Wait(ci >> 1);
    if (rows < kBT) {  // the garbage rows of W S and of the update
      ZeroRowsPast<kThreadsB>(reinterpret_cast<bf16*>(sets + set), 2 * kNk, rows);
    }
    __pipeline_wait_prior(0);
    wgmma::FenceSharedForProducts();
    __syncthreads();  // this chunk's tiles are in; every warp is done with the other set
    if (ci + 1 < seq.num_chunks) {
      k_src += tok_step_k, w_src += tok_step_k, u_src += tok_step_v, G_src += kBT * H;
      if (kOutput) q_src += tok_step_k;
      if (kReadM) m_src += int64_t{kBT} * kBT * H;
      issue(ci + 1);
    }
    __pipeline_commit();

    // Ut^T = U^T - S^T W^T, the accumulators starting from U^T.
    WarpRows<kBT> ut;
    LoadTransposedValues(ut, u_at + set, 2 * Set::kLdValues);
    float(&ut_d)[kBT / 2] = reinterpret_cast<float(&)[kBT / 2]>(ut.x);
    WarpRows<kBT> o;  // o^T / scale (kOutput)
    float(&o_d)[kBT / 2] = reinterpret_cast<float(&)[kBT / 2]>(o.x);
    if (kOutput) o.Zero();
    MultiplyStateCopy(S, s_stage, [&](int k, const uint32_t(&a)[4]) {
      const uint64_t step = set_desc + KMajorStep(k);
      wgmma::MmaRegA<kBT, true, false>(ut_d, a, w_desc + step);
      if (kOutput) wgmma::MmaRegA<kBT, false, false>(o_d, a, q_desc + step);
    });
    // S's bf16 copy to the scratch while the products run.
    GroupBarrier(group);
    s_stage.CopyOut(s_dst, V, K);
    wgmma::Wait<0>();
    // Ut (bf16) to the scratch; for the gated rule, the decays exp(G_L - G) of the lane's tokens
    // and gamma_L (the ungated rule's are 1: Ut's bf16 copy is the product's operand).
    uint32_t ut_a[kBT / 16][4];
#pragma unroll
    for (int s = 0; s < kBT / 16; ++s) {
      ut.Bf16A(s, ut_a[s]);
      ut_stage.Put(s, ut_a[s]);
    }
    // Ut'^T, the keys' operand, in registers of its own (o's product reads ut_a meanwhile); the
    // ungated rule's decays are 1.
    uint32_t ud_a[kBT / 16][4];
    if (gated) {
      const float G_last = reinterpret_cast<const float*>(sets + set + Set::kG)[rows - 1];
      if (kOutput) ScaleTokensByGamma(o, G_at + set);  // (S^T Q^T) diag(gamma)
      DecayTokens(ut, G_at + set, G_last);
#pragma unroll
      for (int s = 0; s < kBT / 16; ++s) ut.Bf16A(s, ud_a[s]);
      S.Scale(expf(G_last));
    } else {
#pragma unroll
      for (int s = 0; s < kBT / 16; ++s) {
#pragma unroll
        for (int r = 0; r < 4; ++r) ud_a[s][r] = ut_a[s][r];
      }
    }
    // S^T = gamma_L S^T + Ut'^T K (and o^T += Ut^T M^T), with Ut's stores running meanwhile.
    float(&s_d)[K / 2] = reinterpret_cast<float(&)[K / 2]>(S.x);
    wgmma::Fence();
#pragma unroll
    for (int s = 0; s < kBT / 16; ++s) {
      if (kReadM) {
        wgmma::MmaRegA<kBT, false, false>(o_d, ut_a[s], m_desc + set_desc + KMajorStep(s));
      }
      wgmma::MmaRegA<K, false, true>(s_d, ud_a[s], k_desc + set_desc + NMajorStep(s));
    }
    wgmma::Commit();
    GroupAcc64 m;  // (kFormM) M, formed after the state's update
    if (kFormM) FormChunkMat<K>(m, q_desc + set_desc, kk_desc + set_desc);
    GroupBarrier(group);
    ut_stage.CopyOut(ut_dst, ld_v, rows);
    ut_dst += tok_step_v, s_dst += state_step;
    wgmma::Wait<0>();
    if (kFormM) {  // o^T += Ut^T M^T
      PutChunkMat(m, m_tile, rows);
      GroupBarrier(group);
      wgmma::Fence();
#pragma unroll
      for (int s = 0; s < kBT / 16; ++s) {
        wgmma::MmaRegA<kBT, false, false>(o_d, ut_a[s], m_desc + KMajorStep(s));
      }
      wgmma::Commit();
      wgmma::Wait<0>();
    }
    if (kOutput) {
      o.Scale(p.scale);
#pragma unroll
      for (int s = 0; s < kBT / 16; ++s) {
        uint32_t o_a[4];
        o.Bf16A(s, o_a);
        o_stage.Put(s, o_a);
      }
      GroupBarrier(group);
      o_stage.CopyOut(o_dst, p.v_strides.token, rows);
      o_dst += o_step;
    }
  }
  if (p.final_state) {
    float* fin = p.final_state + State(p, n, h) + vw;
    WarpRows<K>::ForTransposed(V, [&](int i, int e, int64_t at) { fin[at] = S.x[i][e]; });
  }
#else
  __trap();  // launched only where the binary has sm_90a code (FLAME_KERNELS_SM90A)
#endif
}

// Shared memory: the column pass's, with kOutput a third key tile (the queries), M (the set's, or
// with kFormM the group's) and o's staging tile per warpgroup.
template <int K, int kBV, bool kOutput, bool kFormM>
inline constexpr size_t StateForwardWgmmaSmemFor() {
  if (!kOutput) return ColumnPassSmem<K, kBV, 2>();
  return (kFormM ? ColumnPassSmem<K, kBV, 3>() : ColumnPassSmem<K, kBV, 3, 1>()) +
         kBV / 64 * size_t{GroupStage<kBT>::kBytes + (kFormM ? kSwizzledTileBytes : 0)};
}
template <bool kOutput, bool kFormM = false>
inline size_t StateForwardWgmmaSmem(int k_dim, int groups) {
  if (k_dim == kBT) {
    return groups == 1 ? StateForwardWgmmaSmemFor<kBT, 64, kOutput, kFormM>()
                       : StateForwardWgmmaSmemFor<kBT, 128, kOutput, kFormM>();
  }
  return groups == 1 ? StateForwardWgmmaSmemFor<2 * kBT, 64, kOutput, kFormM>()
                     : StateForwardWgmmaSmemFor<2 * kBT, 128, kOutput, kFormM>();
}

// The pass's instantiations for K = 64 nk, nk = 1 or 2 (the launcher takes it only there).
template <int kGroups, bool kOutput, bool kFormM = false>
inline void (*StateForwardWgmmaFor(int nk))(StepBase) {
  return nk == 1 ? StateForwardWgmmaKernel<1, kGroups, kOutput, kFormM>
                 : StateForwardWgmmaKernel<2, kGroups, kOutput, kFormM>;
}

}  // namespace flame::kernels::delta_chunk::tiles
