// The backward state pass in column form at K = 256 (sm_90a): StateBackwardWgmmaKernel's steps
// (chunk_delta_column_backward.cuh) -- per chunk, in reverse,
//   dS[chunk] = dS;  dUt = diag(exp(G_L - G)) K dS + MtdO;
//   dS = gamma_L dS + Q^T (scale diag(gamma) dO) - W^T dUt,
// with MtdO = scale M^T dO formed here -- laid out as the forward's split pass
// (chunk_delta_column_forward_split.cuh) to fit: one block per (128 value columns, head,
// sequence) of two warpgroups, each holding 64 columns of dS^T (128 registers a thread); the
// tiles the chunk's first products read (the keys, M, dO's 128 columns, G) double-buffered, the
// queries and W, which only its last products read, in one buffer refilled at the top of each
// chunk; dS[chunk] and dUt stored straight from the warps' bf16 fragments (TransposedPairs), no
// staging tiles. The update's products are 64 x 128 x 16 halves of K, and MtdO's product is
// waited for before dO's fragments are scaled (beside it, they spilled). Measured at (8, 4096, 8,
// 256) on the H200 beside the mma.sync pass (StateBackwardKernel<4, split, 64, MtdO>, 64 columns a
// block, two waves) in one run, ncu per call: 647.2 -> 404.7 us ungated, -> 400.9 gated; with the
// forward's split pass, chunk_delta_rule's forward + backward 2.255-2.265 -> 1.924-1.967 ms,
// chunk_gated_delta_rule's 2.455-2.489 -> 2.162-2.207 (that version: 16 bytes of spills ungated;
// with dO's scaling reading the scale from the parameters, cf5ec50, none -- not timed since).
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/ptx.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/delta_rule/chunk_delta_column_forward_split.cuh"  // kSplitColumn*
#include "kernels/delta_rule/chunk_delta_columns.cuh"
#include "kernels/delta_rule/chunk_delta_state_pass.cuh"  // SeqSources

namespace flame::kernels::delta_chunk::tiles {

// Shared memory (1024-byte aligned): two sets by chunk parity of the keys (kNk swizzled tiles), M,
// dO's 128 columns (row-major, rows padded by 16 bytes) and G; then one buffer of the queries and
// W (kNk tiles each, adjacent); the copy barriers (the two sets', the queries' and W's).
template <int kNk>
struct SplitColumnBackwardLayout {
  static constexpr int kKeys = 0, kM = kNk * kSwizzledTileBytes;
  static constexpr int kValues = kM + kSwizzledTileBytes;
  static constexpr int kLdValues = kSplitColumnCols + 8;
  static constexpr int kG = kValues + kBT * kLdValues * 2;
  static constexpr int kSet = AlignSwizzled(kG + kBT * 4);
  static constexpr int kQ = 2 * kSet, kW = kQ + kNk * kSwizzledTileBytes;
  static constexpr int kBars = kW + kNk * kSwizzledTileBytes;
  static constexpr int kBytes = kBars + kCopyBarrierBytes;
};

// kGated: b.gated (ungated, no decays and no G copies).
template <int kNk, bool kGated>
__global__ void __launch_bounds__(kSplitColumnThreads, 1)
    StateBackwardWgmmaSplitKernel(const __grid_constant__ StepBase b) {
#ifdef FLAME_WGMMA_DEVICE
  using L = SplitColumnBackwardLayout<kNk>;
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
  const int last = seq.num_chunks - 1;
  const int64_t ld_k = int64_t{H} * K, ld_v = int64_t{H} * V;
  // (Chunk ci's addresses are formed where they are used, as in the forward's split pass.)

  uint64_t* bars = reinterpret_cast<uint64_t*>(at + L::kBars);
  // (The copy engine always: this kernel runs only where b.tile_copies holds.)
  const auto bar = [&](int i) { return CopyBarrier(bars + i, true); };
  if (threadIdx.x < 3) bar(threadIdx.x).Init();
  __syncthreads();
  const RowPieces<kThreadsB, kBV / 8> o_pieces(p.v_strides.token, at + L::kValues,
                                               L::kLdValues * 2);
  const bf16* const d_o = p.d_o + In(p.v_strides, seq.batch, seq.bos, h) + v0;
  // Chunk ci's double-buffered tiles (the keys, M, dO, G) into set it % 2.
  const auto issue_set = [&](int it, int ci) {
    const uint32_t set = (it & 1) * L::kSet;
    const int rows = src.Rows(ci), row = src.RowAt(ci);
    const TileGroup tiles(bar(it & 1), kNk + 1);
    tiles.Token(at_s + set + L::kKeys, &b.maps.kn, 0, kNk, h, row, b.s.kn + src.TokAt(ci, K), ld_k,
                rows);
    tiles.Block(at_s + set + L::kM, &b.maps.M, 0, src.MatRowAt(ci),
                b.s.M + Mat(p, seq.first_chunk + ci, h), kBT);
    o_pieces.Issue(d_o + int64_t{ci} * kBT * p.v_strides.token, set, rows);
    if (kGated) {
      IssueChunkG(reinterpret_cast<float*>(at + set + L::kG), b.s.G + src.TokAt(ci, 1), H, rows);
    }
  };
  // Chunk ci's queries and W into their one buffer.
  const auto issue_qw = [&](int ci) {
    const int rows = src.Rows(ci), row = src.RowAt(ci);
    const TileGroup tiles(bar(2), 2 * kNk);
    tiles.Token(at_s + L::kQ, &b.maps.qn, 0, kNk, h, row, b.s.qn + src.TokAt(ci, K), ld_k, rows);
    tiles.Token(at_s + L::kW, &b.maps.w, 0, kNk, h, row, b.s.W + src.TokAt(ci, K), ld_k, rows);
  };

  // dO^T as an A operand of the warp's columns (transposed ldmatrix of dO's rows); the lane's G
  // pairs; the products' descriptors (set 0's; set 1's L::kSet bytes on).
  const uint32_t o_at =
      at_s + L::kValues +
      2 * ((lane % 8 + lane / 16 * 8) * L::kLdValues + lane / 8 % 2 * 8 + 16 * warp);
  const uint32_t G_at = at_s + L::kG + 8 * (lane % 4);
  const uint64_t k_desc = wgmma::DescriptorSwizzle128(at_s + L::kKeys);
  const uint64_t m_desc = wgmma::DescriptorSwizzle128(at_s + L::kM);
  const uint64_t q_desc = wgmma::DescriptorSwizzle128(at_s + L::kQ, kSwizzledTileBytes);
  const uint64_t w_desc = wgmma::DescriptorSwizzle128(at_s + L::kW, kSwizzledTileBytes);
  constexpr uint64_t kHalfK = 2 * kSwizzledTileBytes / 16;  // the update's second half of K
  const float rcp_scale = 1.0f / p.scale;

  WarpRows<K> dS;  // dS^T of the warp's 16 columns
  if (p.d_final_state) {
    const float* fin = p.d_final_state + State(p, n, h) + vw;
    WarpRows<K>::ForTransposed(V, [&](int i, int e, int64_t x) { dS.x[i][e] = fin[x]; });
  } else {
    dS.Zero();
  }
  if (last >= 0) issue_set(0, last);
  __pipeline_commit();
  for (int it = 0; it <= last; ++it) {
    const int ci = last - it, rows = src.Rows(ci);
    const uint32_t set = (it & 1) * L::kSet;
    const uint64_t set_desc = set / 16;
    bar(it & 1).Wait(it >> 1);
    if (rows < kBT) {  // the garbage rows of K dS
      ZeroRowsPast<kThreadsB>(reinterpret_cast<bf16*>(at + set + L::kKeys), kNk, rows);
    }
    __pipeline_wait_prior(0);
    wgmma::FenceSharedForProducts();
    // This chunk's set is in; every warp is done with the other set and with the queries and W.
    __syncthreads();
    issue_qw(ci);
    if (ci > 0) issue_set(it + 1, ci - 1);
    __pipeline_commit();

    // dS^T K^T, each of dS's bf16 fragments also stored as dS[chunk].
    WarpRows<kBT> du;
    du.Zero();
    float(&du_d)[kBT / 2] = reinterpret_cast<float(&)[kBT / 2]>(du.x);
    const TransposedPairs ds_out(b.s.dS + src.StateAt(ci, K * V) + vw, V);
    MultiplyState(
        dS,
        [&](int k, const uint32_t(&a)[4]) {
          wgmma::MmaRegA<kBT, false, false>(du_d, a, k_desc + set_desc + KMajorStep(k));
        },
        [&](int k, const uint32_t(&a)[4]) { ds_out.Store(k, a, K); });
    wgmma::Wait<0>();
    // dUt^T / scale = (dS^T K^T) diag(exp(G_L - G)) / scale + dO^T M (the scale applied once the
    // product is in: dO^T's bf16 fragments stay exact).
    const float G_last = kGated ? reinterpret_cast<const float*>(at + set + L::kG)[rows - 1] : 0.0f;
    if constexpr (kGated) {
      DecayTokens(du, G_at + set, G_last, rcp_scale);
    } else {
      du.Scale(rcp_scale);
    }
    uint32_t o_a[kBT / 16][4];  // dO^T, then dO'^T
#pragma unroll
    for (int s = 0; s < kBT / 16; ++s) {
      ptx::LoadMatrix4Trans(o_a[s], o_at + set + 2 * s * 16 * L::kLdValues);
    }
    wgmma::Fence();
#pragma unroll
    for (int s = 0; s < kBT / 16; ++s) {
      wgmma::MmaRegA<kBT, false, true>(du_d, o_a[s], m_desc + set_desc + NMajorStep(s));
    }
    wgmma::Commit();
    wgmma::Wait<0>();
    // dO'^T = (scale diag(gamma) dO)^T from dO^T's fragments, rounded to bf16 again.
    ScaleOutputGradFragments(o_a, o_a, G_at + set, b);
    // dUt^T; its bf16 copy to the scratch and, negated, the A operand of W's product.
    du.Scale(p.scale);
    uint32_t du_a[kBT / 16][4];
    const TransposedPairs dut_out(b.s.dUt + src.TokAt(ci, V) + vw, ld_v);
#pragma unroll
    for (int s = 0; s < kBT / 16; ++s) {
      du.Bf16A(s, du_a[s]);
      dut_out.Store(s, du_a[s], rows);
    }
    if constexpr (kGated) dS.Scale(expf(G_last));
    bar(2).Wait(it);   // the queries and W
    if (rows < kBT) {  // their garbage rows (adjacent)
      ZeroRowsPast<kThreadsB>(reinterpret_cast<bf16*>(at + L::kQ), 2 * kNk, rows);
      __syncthreads();
    }
    // dS^T = gamma_L dS^T + dO'^T Q - dUt^T W, in two halves of K.
    float(&ds_lo)[K / 4] = reinterpret_cast<float(&)[K / 4]>(dS.x[0]);
    float(&ds_hi)[K / 4] = reinterpret_cast<float(&)[K / 4]>(dS.x[K / 16]);
    wgmma::Fence();
#pragma unroll
    for (int s = 0; s < kBT / 16; ++s) {
      wgmma::MmaRegA<K / 2, false, true>(ds_lo, o_a[s], q_desc + NMajorStep(s));
      wgmma::MmaRegA<K / 2, false, true>(ds_hi, o_a[s], q_desc + NMajorStep(s) + kHalfK);
    }
#pragma unroll
    for (int s = 0; s < kBT / 16; ++s) {
      wgmma::MmaRegA<K / 2, true, true>(ds_lo, du_a[s], w_desc + NMajorStep(s));
      wgmma::MmaRegA<K / 2, true, true>(ds_hi, du_a[s], w_desc + NMajorStep(s) + kHalfK);
    }
    wgmma::Commit();
    wgmma::Wait<0>();
  }
  if (p.d_initial_state) {
    float* d_init = p.d_initial_state + State(p, n, h) + vw;
    WarpRows<K>::ForTransposed(V, [&](int i, int e, int64_t x) { d_init[x] = dS.x[i][e]; });
  }
#else
  __trap();  // launched only where the binary has sm_90a code (FLAME_KERNELS_SM90A)
#endif
}

// The pass's shared memory and instantiations (K = 256; the launcher takes it only there).
inline size_t StateBackwardWgmmaSplitSmem() {
  return kSwizzleAlign + SplitColumnBackwardLayout<4>::kBytes;
}
inline void (*StateBackwardWgmmaSplitFor(bool gated))(StepBase) {
  return gated ? StateBackwardWgmmaSplitKernel<4, true> : StateBackwardWgmmaSplitKernel<4, false>;
}

}  // namespace flame::kernels::delta_chunk::tiles
