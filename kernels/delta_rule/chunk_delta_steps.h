// The chunked delta rule (chunk 64, WY representation), written as a sequence of independent
// "unit" steps: every step is a function of one unit index (a token, a chunk row, a state column,
// ...) that reads the inputs and earlier steps' scratch and writes its own outputs, with no
// synchronisation inside a step. The GPU runs each step as one kernel with one thread per unit
// (chunk_delta.cuh); the CPU test runs the very same steps in a loop (delta_chunk_steps_test.cc),
// so the algorithm is checked against the naive recurrence without a GPU. Correctness first:
// everything is fp32 scalar arithmetic, and the scratch is fp32 in global memory.
//
// Per chunk of L <= 64 rows, with G the chunk-local inclusive cumsum of the log decay g
// (G = 0 for the ungated rule), gamma_i = exp(G_i), D_ij = exp(G_i - G_j) (<= 1 for j <= i), and
// S the state entering the chunk (fla.md §2.1-2.2; exponents are never positive):
//   A  = strict_tril(diag(beta) K K^T * D)                 T = (I + A)^-1 (forward substitution)
//   W  = T diag(beta gamma) K      U = T diag(beta) V      Ut = U - W S  (the new values)
//   O  = scale [diag(gamma) Q S + M Ut],  M = tril(Q K^T * D)
//   S' = gamma_L S + (diag(exp(G_L - G)) K)^T Ut
// The backward recomputes the forward scratch, walks the state gradient back per chunk
// (dUt = scale M^T dO + Kd dS', dS = gamma_L dS' + scale (diag(gamma) Q)^T dO - W^T dUt), and
// then differentiates each chunk's formulas; dA = -T^T dT T^T carries the gradient through the
// triangular inverse. Each step's comment gives its formula.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

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
constexpr float kL2NormEps = 1e-6f;
constexpr float kSoftplusThreshold = 20.0f;

// fp32 scratch, carved from params.workspace. Token tensors are [B*T, H, D] (flat token row r =
// batch * T + t); chunk matrices are [chunks, H, 64, 64]; states are [chunks, H, K, V].
struct Scratch {
  // forward
  float* qn;  // [R,H,K]  q as the recurrence sees it (normalised or copied)
  float* kn;  // [R,H,K]
  float* bt;  // [R,H]    beta
  float* g;   // [R,H]    log decay (0 for the ungated rule)
  float* G;   // [R,H]    chunk-local inclusive cumsum of g
  float* A;   // chunk matrix: strict_tril(diag(beta) K K^T * D)
  float* T;   // chunk matrix: (I + A)^-1
  float* M;   // chunk matrix: tril(Q K^T * D)
  float* W;   // [R,H,K]
  float* U;   // [R,H,V]
  float* Ut;  // [R,H,V]  the new values U - W S
  float* S;   // state entering each chunk
  // backward
  float* dS;         // gradient of the state leaving each chunk
  float* dUt;        // [R,H,V]
  float* dW;         // [R,H,K]
  float* dKd;        // [R,H,K]  gradient of the decayed keys of the state update
  float* SdO;        // [R,H,K]  S dO
  float* dM;         // chunk matrix
  float* dT;         // chunk matrix
  float* Z;          // chunk matrix: dT T^T
  float* dA;         // chunk matrix: -T^T dT T^T, strictly lower
  float* dX;         // [R,H,K]  gradient of diag(beta gamma) K
  float* dY;         // [R,H,V]  gradient of diag(beta) V
  float* dG;         // [R,H]
  float* gate_sums;  // [chunks,H,2]: per-chunk sums of dg * g and of da (for dA_log, ddt_bias)
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
FLAME_HD inline int64_t State(const ChunkDeltaParams& p, int block, int h) {
  return (int64_t{block} * p.heads + h) * p.k_dim * p.v_dim;
}

FLAME_HD inline float Load(const __nv_bfloat16* x, int64_t i) { return __bfloat162float(x[i]); }

FLAME_HD inline float Dot(const float* a, const float* b, int n) {
  float acc = 0.0f;
  for (int i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

FLAME_HD inline float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

FLAME_HD inline float Softplus(float x) { return x > kSoftplusThreshold ? x : log1pf(expf(x)); }

// ---------------------------------------------------------------------------------------------
// Workspace

inline size_t AlignUp(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Carves the scratch from `base` (null: only measures). Returns the bytes used.
inline size_t CarveScratch(const ChunkDeltaParams& p, bool backward, void* base, Scratch* s) {
  const size_t R = static_cast<size_t>(TokenRows(p)) * p.heads;
  const size_t C = static_cast<size_t>(TotalChunks(p)) * p.heads;
  const size_t K = p.k_dim, V = p.v_dim;
  size_t used = 0;
  auto take = [&](float** field, size_t floats) {
    float* ptr = base ? reinterpret_cast<float*>(static_cast<char*>(base) + used) : nullptr;
    if (field) *field = ptr;
    used += AlignUp(floats * sizeof(float));
  };
  Scratch unused{};
  Scratch& x = s ? *s : unused;
  const size_t mat = C * kBT * kBT, state = C * K * V;
  take(&x.qn, R * K), take(&x.kn, R * K), take(&x.bt, R), take(&x.g, R), take(&x.G, R);
  take(&x.A, mat), take(&x.T, mat), take(&x.M, mat);
  take(&x.W, R * K), take(&x.U, R * V), take(&x.Ut, R * V), take(&x.S, state);
  if (backward) {
    take(&x.dS, state), take(&x.dUt, R * V), take(&x.dW, R * K), take(&x.dKd, R * K);
    take(&x.SdO, R * K), take(&x.dM, mat), take(&x.dT, mat), take(&x.Z, mat), take(&x.dA, mat);
    take(&x.dX, R * K), take(&x.dY, R * V), take(&x.dG, R), take(&x.gate_sums, C * 2);
  }
  return used;
}

// ---------------------------------------------------------------------------------------------
// Forward steps (the backward reruns them). Each: `units` and `operator()(unit)`.

struct StepBase {
  ChunkDeltaParams p;
  Scratch s;
  bool gated;

  // Steps with one unit per (chunk, head, row i) number them u = (chunk * heads + h) * 64 + i.
  struct ChunkRow {
    int i, h, chunk;
    Chunk c;
  };
  FLAME_HD int64_t ChunkRowUnits() const { return int64_t{TotalChunks(p)} * p.heads * kBT; }
  FLAME_HD ChunkRow DecodeChunkRow(int64_t u) const {
    const int chunk = static_cast<int>(u / kBT / p.heads);
    return {static_cast<int>(u % kBT), static_cast<int>(u / kBT % p.heads), chunk,
            LocateChunk(p, chunk)};
  }
};

// Unit = (token row, head): qn, kn, beta, g.
struct PrepareTokens : StepBase {
  FLAME_HD int64_t Units() const { return TokenRows(p) * p.heads; }
  FLAME_HD void operator()(int64_t u) const {
    const int h = static_cast<int>(u % p.heads);
    const int64_t r = u / p.heads;
    const int b = static_cast<int>(r / p.seq_len), t = static_cast<int>(r % p.seq_len);
    const int64_t in = In(p.qk_strides, b, t, h), out = Tok(p, r, h, p.k_dim);
    float ss_q = 0.0f, ss_k = 0.0f;
    for (int c = 0; c < p.k_dim; ++c) {
      const float qc = Load(p.q, in + c), kc = Load(p.k, in + c);
      s.qn[out + c] = qc;
      s.kn[out + c] = kc;
      ss_q += qc * qc;
      ss_k += kc * kc;
    }
    if (p.qk_l2norm) {
      const float rq = 1.0f / sqrtf(ss_q + kL2NormEps), rk = 1.0f / sqrtf(ss_k + kL2NormEps);
      for (int c = 0; c < p.k_dim; ++c) {
        s.qn[out + c] *= rq;
        s.kn[out + c] *= rk;
      }
    }
    const int64_t si = In(p.scalar_strides, b, t, h);
    s.bt[u] = p.beta_sigmoid ? Sigmoid(p.beta[si]) : p.beta[si];
    float g = 0.0f;
    if (gated) {
      g = p.gate_in_kernel ? -expf(p.A_log[h]) * Softplus(p.a[si] + p.dt_bias[h]) : p.a[si];
    }
    s.g[u] = g;
  }
};

// Unit = (chunk, head): G = chunk-local inclusive cumsum of g.
struct GateCumsum : StepBase {
  FLAME_HD int64_t Units() const { return int64_t{TotalChunks(p)} * p.heads; }
  FLAME_HD void operator()(int64_t u) const {
    const int h = static_cast<int>(u % p.heads);
    const Chunk c = LocateChunk(p, static_cast<int>(u / p.heads));
    float acc = 0.0f;
    for (int i = 0; i < c.rows; ++i) {
      const int64_t x = (c.row + i) * p.heads + h;
      acc += s.g[x];
      s.G[x] = acc;
    }
  }
};

// Unit = (chunk, head, row i): row i of A and M (rows past the chunk are zero).
//   A_ij = beta_i (k_i . k_j) D_ij (j < i),   M_ij = (q_i . k_j) D_ij (j <= i)
struct Scores : StepBase {
  FLAME_HD int64_t Units() const { return ChunkRowUnits(); }
  FLAME_HD void operator()(int64_t u) const {
    const auto [i, h, chunk, c] = DecodeChunkRow(u);
    float* a_row = s.A + Mat(p, chunk, h) + i * kBT;
    float* m_row = s.M + Mat(p, chunk, h) + i * kBT;
    for (int j = 0; j < kBT; ++j) a_row[j] = m_row[j] = 0.0f;
    if (i >= c.rows) return;
    const int64_t ri = (c.row + i) * p.heads + h;
    const float* qi = s.qn + ri * p.k_dim;
    const float* ki = s.kn + ri * p.k_dim;
    for (int j = 0; j <= i; ++j) {
      const int64_t rj = (c.row + j) * p.heads + h;
      const float* kj = s.kn + rj * p.k_dim;
      const float decay = expf(s.G[ri] - s.G[rj]);
      m_row[j] = Dot(qi, kj, p.k_dim) * decay;
      if (j < i) a_row[j] = s.bt[ri] * Dot(ki, kj, p.k_dim) * decay;
    }
  }
};

// Unit = (chunk, head): T = (I + A)^-1 by forward substitution, T_i = e_i - sum_{m<i} A_im T_m.
struct SolveTril : StepBase {
  FLAME_HD int64_t Units() const { return int64_t{TotalChunks(p)} * p.heads; }
  FLAME_HD void operator()(int64_t u) const {
    const float* A = s.A + Mat(p, static_cast<int>(u / p.heads), static_cast<int>(u % p.heads));
    float* T = s.T + (A - s.A);
    for (int i = 0; i < kBT; ++i) {
      for (int j = 0; j < kBT; ++j) T[i * kBT + j] = i == j ? 1.0f : 0.0f;
      for (int m = 0; m < i; ++m) {
        const float a = A[i * kBT + m];
        if (a == 0.0f) continue;
        for (int j = 0; j <= m; ++j) T[i * kBT + j] -= a * T[m * kBT + j];
      }
    }
  }
};

// Unit = (chunk, head, column c of [K | V]):
//   W[:,c] = T (beta gamma k[:,c]),   U[:,c] = T (beta v[:,c])
struct ComputeWU : StepBase {
  FLAME_HD int64_t Units() const { return int64_t{TotalChunks(p)} * p.heads * (p.k_dim + p.v_dim); }
  FLAME_HD void operator()(int64_t u) const {
    const int width = p.k_dim + p.v_dim;
    const int col = static_cast<int>(u % width);
    const int h = static_cast<int>(u / width % p.heads);
    const int chunk = static_cast<int>(u / width / p.heads);
    const Chunk c = LocateChunk(p, chunk);
    const float* T = s.T + Mat(p, chunk, h);
    const bool is_k = col < p.k_dim;
    for (int i = 0; i < c.rows; ++i) {
      float acc = 0.0f;
      for (int m = 0; m <= i; ++m) {
        const int64_t rm = (c.row + m) * p.heads + h;
        const float x = is_k ? expf(s.G[rm]) * s.kn[rm * p.k_dim + col]
                             : Load(p.v, In(p.v_strides, c.batch, c.t0 + m, h) + col - p.k_dim);
        acc += T[i * kBT + m] * s.bt[rm] * x;
      }
      const int64_t ri = (c.row + i) * p.heads + h;
      if (is_k) {
        s.W[ri * p.k_dim + col] = acc;
      } else {
        s.U[ri * p.v_dim + col - p.k_dim] = acc;
      }
    }
  }
};

// Unit = (sequence, head, state column j), sequential over the sequence's chunks:
//   S[chunk] = S;  Ut = U - W S;  S = gamma_L S + sum_i exp(G_L - G_i) k_i Ut_i
// Column j of the state only ever needs column j: the columns are independent.
struct StateForward : StepBase {
  FLAME_HD int64_t Units() const { return int64_t{NumSeqs(p)} * p.heads * p.v_dim; }
  FLAME_HD void operator()(int64_t u) const {
    const int j = static_cast<int>(u % p.v_dim);
    const int h = static_cast<int>(u / p.v_dim % p.heads);
    const int n = static_cast<int>(u / p.v_dim / p.heads);
    const int K = p.k_dim, V = p.v_dim;
    float col[kMaxK];
    for (int k = 0; k < K; ++k) {
      col[k] = p.initial_state ? p.initial_state[State(p, n, h) + int64_t{k} * V + j] : 0.0f;
    }
    const Seq seq = LocateSeq<kBT>(p, n);
    for (int ci = 0; ci < seq.num_chunks; ++ci) {
      const Chunk c = MakeChunk(p, seq, ci);
      float* S = s.S + State(p, c.global, h);
      for (int k = 0; k < K; ++k) S[int64_t{k} * V + j] = col[k];
      for (int i = 0; i < c.rows; ++i) {
        const int64_t ri = (c.row + i) * p.heads + h;
        s.Ut[ri * V + j] = s.U[ri * V + j] - Dot(s.W + ri * K, col, K);
      }
      const float G_last = s.G[(c.row + c.rows - 1) * p.heads + h];
      for (int k = 0; k < K; ++k) col[k] *= expf(G_last);
      for (int i = 0; i < c.rows; ++i) {
        const int64_t ri = (c.row + i) * p.heads + h;
        const float ut = s.Ut[ri * V + j] * expf(G_last - s.G[ri]);
        for (int k = 0; k < K; ++k) col[k] += s.kn[ri * K + k] * ut;
      }
    }
    if (p.final_state) {
      for (int k = 0; k < K; ++k) p.final_state[State(p, n, h) + int64_t{k} * V + j] = col[k];
    }
  }
};

// Unit = (chunk, head, row i): o_i = scale [gamma_i q_i^T S + sum_{m<=i} M_im Ut_m].
struct Output : StepBase {
  FLAME_HD int64_t Units() const { return ChunkRowUnits(); }
  FLAME_HD void operator()(int64_t u) const {
    const auto [i, h, chunk, c] = DecodeChunkRow(u);
    if (i >= c.rows) return;
    const int K = p.k_dim, V = p.v_dim;
    const int64_t ri = (c.row + i) * p.heads + h;
    const float* qi = s.qn + ri * K;
    const float* S = s.S + State(p, chunk, h);
    const float* M = s.M + Mat(p, chunk, h) + i * kBT;
    const float gamma = expf(s.G[ri]);
    __nv_bfloat16* o = p.o + In(p.v_strides, c.batch, c.t0 + i, h);
    for (int j = 0; j < V; ++j) {
      float inter = 0.0f, intra = 0.0f;
      for (int k = 0; k < K; ++k) inter += qi[k] * S[int64_t{k} * V + j];
      for (int m = 0; m <= i; ++m) intra += M[m] * s.Ut[((c.row + m) * p.heads + h) * V + j];
      o[j] = __float2bfloat16(p.scale * (gamma * inter + intra));
    }
  }
};

}  // namespace flame::kernels::delta_chunk
