// The chunked delta rule (chunk 64, WY representation): its scratch, indexing and the scalar
// "unit" steps -- functions of one unit index (a chunk, a head) with no synchronisation -- for the
// cheap per-chunk work around the kernels of chunk_delta_tiles.cuh. chunk_delta.cuh runs each
// step as one kernel with one thread per unit.
//
// Per chunk of L <= 64 rows, with G the chunk-local inclusive cumsum of the log decay g
// (G = 0 for the ungated rule), gamma_i = exp(G_i), D_ij = exp(G_i - G_j) (<= 1 for j <= i), and
// S the state entering the chunk (fla.md §2.1-2.2; exponents are never positive):
//   A  = strict_tril(diag(beta) K K^T * D)                 T = (I + A)^-1 (forward substitution)
//   W  = T diag(beta gamma) K      U = T diag(beta) V      Ut = U - W S  (the new values)
//   O  = scale [diag(gamma) Q S + M Ut],  M = tril(Q K^T * D)
//   S' = gamma_L S + (diag(exp(G_L - G)) K)^T Ut
// The backward recomputes the forward scratch the caller did not keep (ChunkDeltaParams::
// chunk_states), walks the state gradient back per chunk
// (dUt = scale M^T dO + Kd dS', dS = gamma_L dS' + scale (diag(gamma) Q)^T dO - W^T dUt), and
// then differentiates each chunk's formulas. Everything that depends on the chunk only through
// U - W S = Ut takes its gradient through Ut: with Y = diag(beta) V, X = diag(beta gamma) K and
// dY = T^T dUt, the gradient through the triangular inverse is dA = -strict_tril(dY Ut^T) (as
// -T^T dT T^T with dT = dUt (Y - X S)^T, since T (Y - X S) = Ut), and X's is dX = -dY S^T (as
// T^T dW with dW = -dUt S^T). Each kernel's comment gives its formulas.
#pragma once

#include <cuda.h>  // CUtensorMap (a type only)
#include <cuda_bf16.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/common/chunk_seqs.h"
#include "kernels/delta_rule/chunk_delta_params.h"

// Host and device: the same step code runs in the GPU kernels and in the CPU test.
#ifndef FLAME_HD
#if defined(__CUDACC__)
#define FLAME_HD __host__ __device__
#else
#define FLAME_HD
#endif
#endif

namespace flame::kernels::delta_chunk {

constexpr int kBT = kDeltaChunkSize;
constexpr int kMaxK = kDeltaMaxKDim;
constexpr int kMaxKSlices = kMaxK / kBT;  // 64-wide slices of K
constexpr float kL2NormEps = 1e-6f;
constexpr float kSoftplusThreshold = 20.0f;

// Scratch, carved from params.workspace: fp32 but for the bf16 qn, kn, W, U, Ut, the gradients
// dUt, dY and dAb, and the per-chunk states S, dS (the bf16 copies the state passes multiply; see
// chunk_delta_state_pass.cuh); S, Ut, W, M and TKD come from params.chunk_states instead where
// the caller keeps them (CarveKeptStates). Token tensors are [B*T, H, D] (flat token row
// r = batch * T + t); chunk matrices are [chunks, H, 64, 64]; states are [chunks, H, K, V].
struct Scratch {
  // forward
  __nv_bfloat16* q_rows;    // [R,H,K]  copies of q and k for the recurrence (normalised with the
  __nv_bfloat16* k_rows;    //          l2norm); null where it reads the inputs in place
  const __nv_bfloat16* qn;  // [R,H,K]  q as the recurrence sees it: q_rows, or the input q
  const __nv_bfloat16* kn;  // [R,H,K]
  float* bt;                // [R,H]    beta
  float* g;                 // [R,H]    log decay (0 for the ungated rule)
  float* G;                 // [R,H]    chunk-local inclusive cumsum of g
  __nv_bfloat16* M;         // chunk matrix: tril(Q K^T * D) (bf16)
  __nv_bfloat16* W;         // [R,H,K]  W = T diag(beta gamma) K (bf16), for the state passes
  __nv_bfloat16* U;         // [R,H,V]  U = T diag(beta) V (bf16); null in a backward given
                            //          the kept states (only StateForwardKernel reads it)
  __nv_bfloat16* Ut;        // [R,H,V]  the new values U - W S (bf16)
  __nv_bfloat16* S;         // state entering each chunk (bf16)
  // backward
  // chunk matrix: T = (I + A)^-1 (lower triangular) on and below the diagonal, and KD^T above it,
  // KD = strict_tril(K K^T * D): one fp32 matrix where two took twice the bytes to write and
  // read. From ChunkPrepare (the forward's only where kept), for WYBackward.
  float* TKD;
  __nv_bfloat16* dS;   // gradient of the state leaving each chunk (bf16)
  float* MtdO;         // [R,H,V]  scale M^T dO, the chunk-local part of dUt (for the mma.sync
                       //          passes that do not form it)
  __nv_bfloat16* dUt;  // [R,H,V]
  __nv_bfloat16* dY;   // [R,H,V]  T^T dUt (WYBackward, for RowTerms' dX = -dY S^T)
  __nv_bfloat16* dAb;  // [chunks,H,64,64]: the strictly lower dAb as one bf16 matrix dAb_p, its
                       //          hi parts below the diagonal and its lo parts transposed above
                       //          it, so that dAb_p + dAb_p^T = dAb + dAb^T to 16 bits (WYBackward,
                       //          for RowTerms' (dAb + dAb^T) K = dAb_p K + dAb_p^T K)
  float* dk_normed;    // [R,H,K]  l2norm only: the gradients of the normalised k and q
  float* dq_normed;    //          (RowTerms; FinishRowsKernel's input)
  float* dG;           // [R,H]    WYBackward's part, then (RowGradSumsKernel) the gradient
  float* dG_parts;     // [chunks,H,kMaxKSlices,64]: RowTerms' parts of dG, per 64-wide K slice,
  float* kx_parts;     //          and of gamma_i k_i . dX_i (dbeta's part; times beta_i, dG's)
  float* gate_sums;    // [chunks,H,2]: per-chunk sums of dg * g and of da (for dA_log, ddt_bias)
};

// ---------------------------------------------------------------------------------------------
// Sizes and indexing

FLAME_HD inline int NumSeqs(const ChunkDeltaParams& p) {
  return p.cu_seqlens != nullptr ? p.num_seqs : p.batch;
}

FLAME_HD inline int TotalChunks(const ChunkDeltaParams& p) {
  return p.cu_seqlens != nullptr ? p.total_chunks : p.batch * ((p.seq_len + kBT - 1) / kBT);
}

FLAME_HD inline int64_t TokenRows(const ChunkDeltaParams& p) {
  return int64_t{p.batch} * p.seq_len;
}

using Seq = ChunkSeq;

struct Chunk {
  int batch;    // batch row
  int t0;       // first token (within the batch row)
  int rows;     // valid rows, 1..64
  int global;   // chunk index over the whole batch
  int64_t row;  // flat token row of the first token: batch * T + t0
};

FLAME_HD inline Chunk MakeChunk(const ChunkDeltaParams& p, const Seq& s, int index) {
  Chunk c;
  c.batch = s.batch;
  c.t0 = s.bos + index * kBT;
  c.rows = s.len - index * kBT < kBT ? s.len - index * kBT : kBT;
  c.global = s.first_chunk + index;
  c.row = int64_t{s.batch} * p.seq_len + c.t0;
  return c;
}

FLAME_HD inline Chunk LocateChunk(const ChunkDeltaParams& p, int global) {
  const int n = SeqOfChunk<kBT>(p, global);
  const Seq s = LocateSeq<kBT>(p, n);
  return MakeChunk(p, s, global - s.first_chunk);
}

// Element offsets.
FLAME_HD inline int64_t In(const TensorStrides& s, int batch, int t, int h) {
  return batch * s.batch + int64_t{t} * s.token + int64_t{h} * s.head;
}
FLAME_HD inline int64_t Tok(const ChunkDeltaParams& p, int64_t row, int h, int dim) {
  return (row * p.heads + h) * dim;
}
FLAME_HD inline int64_t Mat(const ChunkDeltaParams& p, int chunk, int h) {
  return (int64_t{chunk} * p.heads + h) * kBT * kBT;
}
// The first row of that matrix in the chunk matrices as [chunks x H x 64, 64] (the tile maps').
FLAME_HD inline int64_t MatRow(const ChunkDeltaParams& p, int chunk, int h) {
  return (int64_t{chunk} * p.heads + h) * kBT;
}
FLAME_HD inline int64_t State(const ChunkDeltaParams& p, int block, int h) {
  return (int64_t{block} * p.heads + h) * p.k_dim * p.v_dim;
}
FLAME_HD inline int64_t DGPart(const ChunkDeltaParams& p, int chunk, int h, int slice) {
  return ((int64_t{chunk} * p.heads + h) * kMaxKSlices + slice) * kBT;
}

FLAME_HD inline float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

FLAME_HD inline float Softplus(float x) { return x > kSoftplusThreshold ? x : log1pf(expf(x)); }

// Without the l2norm the recurrence sees q and k as given. Where they are laid out as the
// scratch's token tensors (dense [B*T, H, K]), the kernels read them in place: no copy, no
// scratch for them.
FLAME_HD inline bool QKInPlace(const ChunkDeltaParams& p) {
  const int64_t row = int64_t{p.heads} * p.k_dim;
  return !p.qk_l2norm && p.qk_strides.head == p.k_dim && p.qk_strides.token == row &&
         (p.batch == 1 || p.qk_strides.batch == row * p.seq_len);
}

// ---------------------------------------------------------------------------------------------
// Workspace

inline size_t AlignUp(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Carves what a caller may keep from the forward for the backward (ChunkDeltaParams::
// chunk_states) from `base` (null: only measures): the per-chunk states S and the new values Ut
// (the forward's state pass), W and the chunk matrices M and TKD (its ChunkPrepareKernel, which
// stores TKD only there) -- everything the backward would otherwise recompute but the row
// scalars and the gate's cumsum. Returns the bytes used.
inline size_t CarveKeptStates(const ChunkDeltaParams& p, void* base, Scratch* s) {
  const size_t rows = static_cast<size_t>(TokenRows(p)) * p.heads;
  const size_t chunks = static_cast<size_t>(TotalChunks(p)) * p.heads;
  const size_t ut = AlignUp(rows * p.v_dim * sizeof(__nv_bfloat16));
  const size_t states = AlignUp(chunks * p.k_dim * p.v_dim * sizeof(__nv_bfloat16));
  const size_t w = AlignUp(rows * p.k_dim * sizeof(__nv_bfloat16));
  const size_t m = AlignUp(chunks * kBT * kBT * sizeof(__nv_bfloat16));
  const size_t mat = AlignUp(chunks * kBT * kBT * sizeof(float));
  if (base != nullptr) {
    char* at = static_cast<char*>(base);
    s->Ut = reinterpret_cast<__nv_bfloat16*>(at);
    s->S = reinterpret_cast<__nv_bfloat16*>(at += ut);
    s->W = reinterpret_cast<__nv_bfloat16*>(at += states);
    s->M = reinterpret_cast<__nv_bfloat16*>(at += w);
    s->TKD = reinterpret_cast<float*>(at + m);
  }
  return ut + states + w + m + mat;
}

// Carves the scratch from `base` (null: only measures). Returns the bytes used. `mtdo`: the
// backward's state pass reads MtdO from the scratch (BackwardReadsMtdO: the mma.sync passes but
// the variant that forms it itself, as the column pass does).
inline size_t CarveScratch(const ChunkDeltaParams& p, bool backward, bool mtdo, void* base,
                           Scratch* s) {
  const size_t R = static_cast<size_t>(TokenRows(p)) * p.heads;
  const size_t C = static_cast<size_t>(TotalChunks(p)) * p.heads;
  const size_t K = p.k_dim, V = p.v_dim;
  size_t used = 0;
  auto take = [&](auto** field, size_t elements) {
    using Element = std::remove_reference_t<decltype(**field)>;
    *field = base ? reinterpret_cast<Element*>(static_cast<char*>(base) + used) : nullptr;
    used += AlignUp(elements * sizeof(Element));
  };
  Scratch unused{};
  Scratch& x = s ? *s : unused;
  const size_t mat = C * kBT * kBT, state = C * K * V;
  if (QKInPlace(p)) {
    x.q_rows = x.k_rows = nullptr;
    x.qn = p.q, x.kn = p.k;
  } else {
    take(&x.q_rows, R * K), take(&x.k_rows, R * K);
    x.qn = x.q_rows, x.kn = x.k_rows;
  }
  take(&x.bt, R), take(&x.g, R), take(&x.G, R);
  const bool kept = p.chunk_states != nullptr;
  if (kept) {
    CarveKeptStates(p, p.chunk_states, &x);
  } else {
    take(&x.M, mat), take(&x.W, R * K), take(&x.Ut, R * V), take(&x.S, state);
  }
  // U feeds only StateForwardKernel, which a backward given the kept states skips.
  x.U = nullptr;
  if (!backward || !kept) take(&x.U, R * V);
  if (backward) {
    if (!kept) take(&x.TKD, mat);
    take(&x.dS, state), take(&x.dUt, R * V);
    x.MtdO = nullptr;
    if (mtdo) take(&x.MtdO, R * V);
    take(&x.dY, R * V), take(&x.dAb, C * kBT * kBT);
    x.dk_normed = x.dq_normed = nullptr;
    if (p.qk_l2norm) take(&x.dk_normed, R * K), take(&x.dq_normed, R * K);
    take(&x.dG, R);
    take(&x.dG_parts, C * kMaxKSlices * kBT), take(&x.kx_parts, C * kMaxKSlices * kBT);
    take(&x.gate_sums, C * 2);
  }
  return used;
}

// ---------------------------------------------------------------------------------------------
// Steps. Each: `Units()` and `operator()(unit)`.

// Tensor maps (kernels/common/tensor_map.h) for the copies by the copy engine on sm_90 of the state
// passes and RowTermsWgmmaKernel (chunk_delta.cuh, BuildTileMaps): W, the keys and the queries as
// [R, H, K], U, Ut and dY as [R, H, V], in boxes of 64 tokens by 64 columns; M and dAb as [chunks x
// H x 64, 64], a matrix a box; the per-chunk states S and dS as
// [chunks x H x K, V], 64 x 64 boxes. Those whose scratch the step does not carve stay empty. The
// kernels take StepBase as a __grid_constant__ parameter, so that the maps stay in parameter
// space, where the copy instructions read them.
struct TileMaps {
  CUtensorMap w, kn, qn, M, u, ut, dy, dab, S, dS;
};

struct StepBase {
  ChunkDeltaParams p;
  Scratch s;
  bool gated;
  bool column_passes = false;  // the state passes in column form (chunk_delta.cuh, UseColumnPasses)
  bool warpgroup_products = false;  // the sm_90a kernels run (UseWarpgroupProducts)
  bool row_passes = false;          // the row-form passes are among the state passes' variants
                                    // (chunk_delta.cuh, UseRowPasses)
  // The tiles come by the copy engine (sm_90, not portable_kernels; chunk_delta.cuh,
  // MakeStepBase): the mma.sync passes' cp.async path stays tested on the H200 that way.
  bool tile_copies = false;
  TileMaps maps{};  // filled where tile_copies (BuildTileMaps)
};

// The scalars of unit (token row, head) from its inputs (beta: beta, or its logits with
// beta_sigmoid; g: a, or a + dt_bias with the in-kernel gate; a_log: A_log[h] with it) to the
// scratch: beta, and the log decay g (0 ungated; fla's in-kernel gate with gate_in_kernel).
// Ungated, also its chunk-local cumsum G = 0, for which GateCumsumKernel then does not run.
FLAME_HD inline void StoreRowScalars(const StepBase& b, int64_t unit, float beta, float g,
                                     float a_log) {
  const ChunkDeltaParams& p = b.p;
  b.s.bt[unit] = p.beta_sigmoid ? Sigmoid(beta) : beta;
  b.s.g[unit] = b.gated && p.gate_in_kernel ? -expf(a_log) * Softplus(g) : g;
  if (!b.gated) b.s.G[unit] = 0.0f;
}

// Unit = (token row, head): the row scalars, where the kernels read q and k in place (else
// PrepareRowsKernel writes the scalars beside the rows).
struct RowScalars : StepBase {
  FLAME_HD int64_t Units() const { return TokenRows(p) * p.heads; }
  FLAME_HD void operator()(int64_t u) const {
    const int h = static_cast<int>(u % p.heads);
    const int64_t r = u / p.heads;
    const int64_t si =
        In(p.scalar_strides, static_cast<int>(r / p.seq_len), static_cast<int>(r % p.seq_len), h);
    const float g = !gated ? 0.0f : p.gate_in_kernel ? p.a[si] + p.dt_bias[h] : p.a[si];
    StoreRowScalars(*this, u, p.beta[si], g, gated && p.gate_in_kernel ? p.A_log[h] : 0.0f);
  }
};

}  // namespace flame::kernels::delta_chunk
