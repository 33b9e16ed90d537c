// The forward state pass in column form (chunk_delta_columns.cuh) at K = 256, where
// StateForwardWgmmaKernel's double-buffered tile sets and staging tiles do not fit a block's
// shared memory (sm_90a). Per chunk, as there:
//   S[chunk] = S;  Ut = U - W S;  S = gamma_L S + K^T (diag(exp(G_L - G)) Ut);
//   o = scale [diag(gamma) Q S + M Ut],
// one block per (128 value columns, head, sequence) of two warpgroups, each holding 64 columns of
// S^T (warp w: 16 of them, WarpRows<K>: 128 registers at K = 256) and multiplying on warpgroup
// products with its A operands in registers, in this order:
//   Ut^T = U^T - S^T W^T:            K / 16 steps of 64 x 64 x 16 (B = W);
//   o^T = S^T Q^T diag(gamma) + Ut^T M^T, for each half of the chunk's tokens:
//                                    K / 16 + 4 steps of 64 x 32 x 16 (B = the queries, M);
//   S^T = gamma_L S^T + Ut'^T K:     4 steps, each as two 64 x 128 x 16 halves of K.
// What differs, to fit:
// - Shared memory (~205 KB at K = 256): W, the queries, U's 128 columns and G are double-buffered
//   (the chunk's first products read them, so they are copied a chunk ahead); the keys and M,
//   which only its last products read, have one buffer, refilled at the top of each chunk (once
//   the chunk before is done with them) and waited for just before those products. No staging
//   tiles: S[chunk], Ut and o go to memory straight from the warps' bf16 fragments
//   (TransposedPairs), where StateForwardWgmmaKernel stages them for 16-byte stores (a K x 64
//   staging tile per warpgroup is 36 KB at K = 256).
// - Registers: o after Ut and in halves of the tokens, not beside W S as the K <= 128 pass has
//   it. With the state's 128 registers a thread, o's accumulators beside Ut's did not fit (ptxas
//   serialised the products, C7512, and spilled 136 bytes); o whole after Ut still spilled 56
//   bytes ungated; in halves the ungated pass has no spills, the gated one 48 bytes, its products
//   still serialised.
// Each multiprocessor holds one block, two warpgroups' chains: at (8, 4096, 8, 256) the grid is
// 128 blocks, one wave on the H200, where the mma.sync pass's 64-column blocks (233 registers a
// thread, one block a multiprocessor) take two (chunk_delta.cuh, PickForwardPass). Measured there
// beside that pass in one run (ncu per call): 572.5 -> 446.4 us ungated, -> 527.2 gated;
// chunk_delta_rule's forward + backward 2.255-2.265 -> 2.147-2.156 ms (o beside W S, serialised:
// 455 us).
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

constexpr int kSplitColumnGroups = 2;                      // warpgroups a block
constexpr int kSplitColumnCols = 64 * kSplitColumnGroups;  // value columns a block
constexpr int kSplitColumnThreads = 128 * kSplitColumnGroups;

// Shared memory (1024-byte aligned): two sets by chunk parity of W and the queries (kNk swizzled
// tiles each), U's 128 columns (row-major, rows padded by 16 bytes: conflict-free transposed
// ldmatrix) and G; then one buffer of the keys (kNk tiles) and M; the copy barriers (the two
// sets', the keys' and M's).
template <int kNk>
struct SplitColumnLayout {
  static constexpr int kW = 0, kQ = kNk * kSwizzledTileBytes, kValues = 2 * kQ;
  static constexpr int kLdValues = kSplitColumnCols + 8;
  static constexpr int kG = kValues + kBT * kLdValues * 2;
  static constexpr int kSet = AlignSwizzled(kG + kBT * 4);
  static constexpr int kKeys = 2 * kSet, kM = kKeys + kNk * kSwizzledTileBytes;
  static constexpr int kBars = kM + kSwizzledTileBytes;
  static constexpr int kBytes = kBars + kCopyBarrierBytes;
};

// kGated: b.gated (ungated, Ut is the update's operand itself; as a runtime branch, the gated
// rule's registers for Ut' were held in both).
template <int kNk, bool kGated>
__global__ void __launch_bounds__(kSplitColumnThreads, 1)
    StateForwardWgmmaSplitKernel(const __grid_constant__ StepBase b) {
#ifdef FLAME_WGMMA_DEVICE
  using L = SplitColumnLayout<kNk>;
  constexpr int K = kNk * kBT, kBV = kSplitColumnCols, kThreadsB = kSplitColumnThreads;
  extern __shared__ float4 smem4[];
  char* at;
  const uint32_t at_s = AlignedSharedBase(smem4, &at);
  const ChunkDeltaParams& p = b.p;
  const int V = p.v_dim, H = p.heads;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int v0 = blockIdx.x * kBV, h = blockIdx.y, n = blockIdx.z;
  const int vw = v0 + 16 * warp;  // the warp's first value column
  const Seq seq = LocateSeq<kBT>(p, n);
  const SeqSources src(p, seq, h);
  const int64_t ld_k = int64_t{H} * K, ld_v = int64_t{H} * V;
  // (Chunk ci's addresses are formed where they are used, from the parameters, not carried from
  // chunk to chunk: the state takes 128 registers a thread.)

  uint64_t* bars = reinterpret_cast<uint64_t*>(at + L::kBars);
  // (The copy engine always: this kernel runs only where b.tile_copies holds.)
  const auto bar = [&](int i) { return CopyBarrier(bars + i, true); };
  if (threadIdx.x < 3) bar(threadIdx.x).Init();
  __syncthreads();
  const RowPieces<kThreadsB, kBV / 8> u_pieces(ld_v, at + L::kValues, L::kLdValues * 2);
  // Chunk ci's double-buffered tiles (W, the queries, U, G), from the sources' current chunk.
  const auto issue_set = [&](int ci) {
    const uint32_t set = (ci & 1) * L::kSet;
    const int rows = src.Rows(ci), row = src.RowAt(ci);
    const TileGroup tiles(bar(ci & 1), 2 * kNk);
    tiles.Token(at_s + set + L::kW, &b.maps.w, 0, kNk, h, row, b.s.W + src.TokAt(ci, K), ld_k,
                rows);
    tiles.Token(at_s + set + L::kQ, &b.maps.qn, 0, kNk, h, row, b.s.qn + src.TokAt(ci, K), ld_k,
                rows);
    u_pieces.Issue(b.s.U + src.TokAt(ci, V) + v0, set, rows);
    if (kGated) {
      IssueChunkG(reinterpret_cast<float*>(at + set + L::kG), b.s.G + src.TokAt(ci, 1), H, rows);
    }
  };
  // Chunk ci's keys and M into their one buffer.
  const auto issue_keys = [&](int ci) {
    const TileGroup tiles(bar(2), kNk + 1);
    tiles.Token(at_s + L::kKeys, &b.maps.kn, 0, kNk, h, src.RowAt(ci), b.s.kn + src.TokAt(ci, K),
                ld_k, src.Rows(ci));
    tiles.Block(at_s + L::kM, &b.maps.M, 0, src.MatRowAt(ci),
                b.s.M + Mat(p, seq.first_chunk + ci, h), kBT);
  };

  // U^T as an A operand of the warp's columns (transposed ldmatrix of U's rows), the lane's G
  // pairs; the products' descriptors (set 0's; set 1's L::kSet bytes on).
  const uint32_t u_at =
      at_s + L::kValues +
      2 * ((lane % 8 + lane / 16 * 8) * L::kLdValues + lane / 8 % 2 * 8 + 16 * warp);
  const uint32_t G_at = at_s + L::kG + 8 * (lane % 4);
  const uint64_t w_desc = wgmma::DescriptorSwizzle128(at_s + L::kW);
  const uint64_t q_desc = wgmma::DescriptorSwizzle128(at_s + L::kQ);
  const uint64_t k_desc = wgmma::DescriptorSwizzle128(at_s + L::kKeys, kSwizzledTileBytes);
  const uint64_t m_desc = wgmma::DescriptorSwizzle128(at_s + L::kM);
  constexpr uint64_t kHalfK = 2 * kSwizzledTileBytes / 16;  // the update's second half of K

  WarpRows<K> S;  // S^T of the warp's 16 columns
  if (p.initial_state) {
    const float* init = p.initial_state + State(p, n, h) + vw;
    WarpRows<K>::ForTransposed(V, [&](int i, int e, int64_t x) { S.x[i][e] = init[x]; });
  } else {
    S.Zero();
  }
  if (seq.num_chunks > 0) issue_set(0);
  __pipeline_commit();
  for (int ci = 0; ci < seq.num_chunks; ++ci) {
    const int rows = src.Rows(ci);
    const uint32_t set = (ci & 1) * L::kSet;
    const uint64_t set_desc = set / 16;
    bar(ci & 1).Wait(ci >> 1);
    if (rows < kBT) {  // the garbage rows of W (and of the queries: adjacent)
      ZeroRowsPast<kThreadsB>(reinterpret_cast<bf16*>(at + set + L::kW), 2 * kNk, rows);
    }
    __pipeline_wait_prior(0);
    wgmma::FenceSharedForProducts();
    // This chunk's set is in; every warp is done with the other set and with the keys and M.
    __syncthreads();
    issue_keys(ci);
    if (ci + 1 < seq.num_chunks) issue_set(ci + 1);
    __pipeline_commit();

    // Ut^T = U^T - S^T W^T, the accumulators starting from U^T; each of the state's bf16
    // fragments (in groups of four k steps) also stored as S[chunk].
    WarpRows<kBT> ut;
    LoadTransposedValues(ut, u_at + set, 2 * L::kLdValues);
    float(&ut_d)[kBT / 2] = reinterpret_cast<float(&)[kBT / 2]>(ut.x);
    const TransposedPairs s_out(b.s.S + src.StateAt(ci, K * V) + vw, V);
    MultiplyState(
        S,
        [&](int k, const uint32_t(&a)[4]) {
          wgmma::MmaRegA<kBT, true, false>(ut_d, a, w_desc + set_desc + KMajorStep(k));
        },
        [&](int k, const uint32_t(&a)[4]) { s_out.Store(k, a, K); });
    wgmma::Wait<0>();
    // Ut (bf16) to the scratch; for the gated rule, Ut' = diag(exp(G_L - G)) Ut, the update's
    // operand (the ungated rule's decays are 1).
    uint32_t ut_a[kBT / 16][4];
    const TransposedPairs ut_out(b.s.Ut + src.TokAt(ci, V) + vw, ld_v);
#pragma unroll
    for (int s = 0; s < kBT / 16; ++s) {
      ut.Bf16A(s, ut_a[s]);
      ut_out.Store(s, ut_a[s], rows);
    }
    const float G_last = kGated ? reinterpret_cast<const float*>(at + set + L::kG)[rows - 1] : 0.0f;
    uint32_t decayed_a[kGated ? kBT / 16 : 1][4];
    if constexpr (kGated) {
      DecayTokens(ut, G_at + set, G_last);
#pragma unroll
      for (int s = 0; s < kBT / 16; ++s) ut.Bf16A(s, decayed_a[s]);
    }
    const auto& ud_a = [&]() -> const uint32_t(&)[kBT / 16][4] {
      if constexpr (kGated)
        return decayed_a;
      else
        return ut_a;
    }();
    bar(2).Wait(ci);   // the keys and M
    if (rows < kBT) {  // the keys' garbage rows
      ZeroRowsPast<kThreadsB>(reinterpret_cast<bf16*>(at + L::kKeys), kNk, rows);
      __syncthreads();
    }
    // o^T = scale [(S^T Q^T) diag(gamma) + Ut^T M^T], by halves of the chunk's tokens (64 x 32
    // products), after Ut: beside it, or whole, its accumulators with Ut's and the state's did
    // not fit the registers (ptxas serialised the products and spilled).
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      constexpr int kHalf = kBT / 2;
      constexpr uint64_t kHalfRows = kHalf * 128 / 16;  // of a K-major tile, in 16-byte units
      WarpRows<kHalf> o;                                // set by its first step
      float(&o_d)[kHalf / 2] = reinterpret_cast<float(&)[kHalf / 2]>(o.x);
      const uint64_t q_half = q_desc + set_desc + hf * kHalfRows;
      MultiplyState(
          S,
          [&](int k, const uint32_t(&a)[4]) {
            if (k == 0) {
              wgmma::MmaRegA32<false, false>(o_d, a, q_half + KMajorStep(k));
            } else {
              wgmma::MmaRegA32<false>(o_d, a, q_half + KMajorStep(k));
            }
          },
          [](int, const uint32_t(&)[4]) {});
      wgmma::Wait<0>();
      if constexpr (kGated) ScaleTokensByGamma(o, G_at + set + 4 * kHalf * hf);
      wgmma::Fence();
#pragma unroll
      for (int s = 0; s < kBT / 16; ++s) {
        wgmma::MmaRegA32<false>(o_d, ut_a[s], m_desc + hf * kHalfRows + KMajorStep(s));
      }
      wgmma::Commit();
      wgmma::Wait<0>();
      o.Scale(p.scale);
      const TransposedPairs o_out(
          p.o + In(p.v_strides, seq.batch, seq.bos + ci * kBT + kHalf * hf, h) + vw,
          p.v_strides.token);
#pragma unroll
      for (int s = 0; s < kHalf / 16; ++s) {
        uint32_t o_a[4];
        o.Bf16A(s, o_a);
        o_out.Store(s, o_a, rows - kHalf * hf);
      }
    }
    if constexpr (kGated) S.Scale(expf(G_last));
    // S^T = gamma_L S^T + Ut'^T K, in two halves of K.
    float(&s_lo)[K / 4] = reinterpret_cast<float(&)[K / 4]>(S.x[0]);
    float(&s_hi)[K / 4] = reinterpret_cast<float(&)[K / 4]>(S.x[K / 16]);
    wgmma::Fence();
#pragma unroll
    for (int s = 0; s < kBT / 16; ++s) {
      wgmma::MmaRegA<K / 2, false, true>(s_lo, ud_a[s], k_desc + NMajorStep(s));
      wgmma::MmaRegA<K / 2, false, true>(s_hi, ud_a[s], k_desc + NMajorStep(s) + kHalfK);
    }
    wgmma::Commit();
    wgmma::Wait<0>();
  }
  if (p.final_state) {
    float* fin = p.final_state + State(p, n, h) + vw;
    WarpRows<K>::ForTransposed(V, [&](int i, int e, int64_t x) { fin[x] = S.x[i][e]; });
  }
#else
  __trap();  // launched only where the binary has sm_90a code (FLAME_KERNELS_SM90A)
#endif
}

// The pass's shared memory and instantiation (K = 256; the launcher takes it only there).
inline size_t StateForwardWgmmaSplitSmem() { return kSwizzleAlign + SplitColumnLayout<4>::kBytes; }
inline void (*StateForwardWgmmaSplitFor(bool gated))(StepBase) {
  return gated ? StateForwardWgmmaSplitKernel<4, true> : StateForwardWgmmaSplitKernel<4, false>;
}

}  // namespace flame::kernels::delta_chunk::tiles
