// Backward steps of the chunked delta rule (see chunk_delta_steps.h for the forward formulas and
// the unit-step model). After the forward steps have been rerun, with dO = d_o and dS' the
// gradient of the state leaving a chunk:
//   StateBackward   dS[chunk] = dS'; dUt = scale M^T dO + Kd dS';
//                   dS = gamma_L dS' + scale (diag(gamma) Q)^T dO - W^T dUt  (per state column)
//   RowTerms        dW = -dUt S^T, dKd = Ut dS'^T, SdO = dO S^T, dM = scale tril(dO Ut^T)
//   GradT           dT = tril(dW X^T + dUt Y^T), X = diag(beta gamma) K, Y = diag(beta) V
//   GradXY          dX = T^T dW, dY = T^T dUt
//   GradZ, GradA    Z = dT T^T, dA = strict_tril(-T^T Z)
//   RowGrads        dq, dk, dv, dbeta and dG of every row (gathering the terms that other rows'
//                   products send to it), then the l2norm and sigmoid backward
//   GateGrads       dg = reverse chunk-local cumsum of dG; da through the in-kernel gate; the
//                   chunk's sums of dg g and da
//   HeadGrads       dA_log = sum dg g, ddt_bias = sum da over the head's chunks
#pragma once

#include "kernels/delta_rule/chunk_delta_steps.h"

namespace flame::kernels::delta_chunk {

// Unit = (sequence, head, state column j), reverse over the chunks.
struct StateBackward : StepBase {
  FLAME_HD int64_t Units() const { return int64_t{NumSeqs(p)} * p.heads * p.v_dim; }
  FLAME_HD void operator()(int64_t u) const {
    const int j = static_cast<int>(u % p.v_dim);
    const int h = static_cast<int>(u / p.v_dim % p.heads);
    const int n = static_cast<int>(u / p.v_dim / p.heads);
    const int K = p.k_dim, V = p.v_dim;
    float col[kMaxK];
    for (int k = 0; k < K; ++k) {
      col[k] = p.d_final_state ? p.d_final_state[State(p, n, h) + int64_t{k} * V + j] : 0.0f;
    }
    const Seq seq = LocateSeq<kBT>(p, n);
    for (int ci = seq.num_chunks - 1; ci >= 0; --ci) {
      const Chunk c = MakeChunk(p, seq, ci);
      float* dS = s.dS + State(p, c.global, h);
      for (int k = 0; k < K; ++k) dS[int64_t{k} * V + j] = col[k];
      const float* M = s.M + Mat(p, c.global, h);
      const float G_last = s.G[(c.row + c.rows - 1) * p.heads + h];
      for (int i = 0; i < c.rows; ++i) {
        const int64_t ri = (c.row + i) * p.heads + h;
        float acc = 0.0f;
        for (int r = i; r < c.rows; ++r) {
          acc += M[r * kBT + i] * Load(p.d_o, In(p.v_strides, c.batch, c.t0 + r, h) + j);
        }
        s.dUt[ri * V + j] = p.scale * acc + expf(G_last - s.G[ri]) * Dot(s.kn + ri * K, col, K);
      }
      for (int k = 0; k < K; ++k) col[k] *= expf(G_last);
      for (int i = 0; i < c.rows; ++i) {
        const int64_t ri = (c.row + i) * p.heads + h;
        const float qdo =
            p.scale * expf(s.G[ri]) * Load(p.d_o, In(p.v_strides, c.batch, c.t0 + i, h) + j);
        const float dut = s.dUt[ri * V + j];
        for (int k = 0; k < K; ++k) col[k] += s.qn[ri * K + k] * qdo - s.W[ri * K + k] * dut;
      }
    }
    if (p.d_initial_state) {
      for (int k = 0; k < K; ++k) p.d_initial_state[State(p, n, h) + int64_t{k} * V + j] = col[k];
    }
  }
};

// Unit = (chunk, head, row i): the products of row i with the chunk's states.
//   dW_i = -S dUt_i,  dKd_i = dS' Ut_i,  SdO_i = S dO_i,  dM_im = scale dO_i . Ut_m (m <= i)
struct RowTerms : StepBase {
  FLAME_HD int64_t Units() const { return ChunkRowUnits(); }
  FLAME_HD void operator()(int64_t u) const {
    const auto [i, h, chunk, c] = DecodeChunkRow(u);
    const int K = p.k_dim, V = p.v_dim;
    float* dM = s.dM + Mat(p, chunk, h) + i * kBT;
    for (int m = 0; m < kBT; ++m) dM[m] = 0.0f;
    if (i >= c.rows) return;
    const int64_t ri = (c.row + i) * p.heads + h;
    const __nv_bfloat16* d_o = p.d_o + In(p.v_strides, c.batch, c.t0 + i, h);
    const float* S = s.S + State(p, chunk, h);
    const float* dS = s.dS + State(p, chunk, h);
    for (int k = 0; k < K; ++k) {
      float dw = 0.0f, dkd = 0.0f, sdo = 0.0f;
      for (int j = 0; j < V; ++j) {
        const float sv = S[int64_t{k} * V + j];
        dw -= sv * s.dUt[ri * V + j];
        dkd += dS[int64_t{k} * V + j] * s.Ut[ri * V + j];
        sdo += sv * Load(d_o, j);
      }
      s.dW[ri * K + k] = dw;
      s.dKd[ri * K + k] = dkd;
      s.SdO[ri * K + k] = sdo;
    }
    for (int m = 0; m <= i; ++m) {
      const int64_t rm = (c.row + m) * p.heads + h;
      float acc = 0.0f;
      for (int j = 0; j < V; ++j) acc += Load(d_o, j) * s.Ut[rm * V + j];
      dM[m] = p.scale * acc;
    }
  }
};

// Unit = (chunk, head, row i): dT_im = dW_i . X_m + dUt_i . Y_m for m <= i.
struct GradT : StepBase {
  FLAME_HD int64_t Units() const { return ChunkRowUnits(); }
  FLAME_HD void operator()(int64_t u) const {
    const auto [i, h, chunk, c] = DecodeChunkRow(u);
    const int K = p.k_dim, V = p.v_dim;
    float* dT = s.dT + Mat(p, chunk, h) + i * kBT;
    for (int m = 0; m < kBT; ++m) dT[m] = 0.0f;
    if (i >= c.rows) return;
    const int64_t ri = (c.row + i) * p.heads + h;
    for (int m = 0; m <= i; ++m) {
      const int64_t rm = (c.row + m) * p.heads + h;
      const __nv_bfloat16* vm = p.v + In(p.v_strides, c.batch, c.t0 + m, h);
      float acc_v = 0.0f;
      for (int j = 0; j < V; ++j) acc_v += s.dUt[ri * V + j] * Load(vm, j);
      const float acc_k = Dot(s.dW + ri * K, s.kn + rm * K, K);
      dT[m] = s.bt[rm] * (expf(s.G[rm]) * acc_k + acc_v);
    }
  }
};

// Unit = (chunk, head, column c of [K | V]): dX[:,c] = T^T dW[:,c], dY[:,c] = T^T dUt[:,c].
struct GradXY : StepBase {
  FLAME_HD int64_t Units() const { return int64_t{TotalChunks(p)} * p.heads * (p.k_dim + p.v_dim); }
  FLAME_HD void operator()(int64_t u) const {
    const int width = p.k_dim + p.v_dim;
    const int col = static_cast<int>(u % width);
    const int h = static_cast<int>(u / width % p.heads);
    const int chunk = static_cast<int>(u / width / p.heads);
    const Chunk c = LocateChunk(p, chunk);
    const float* T = s.T + Mat(p, chunk, h);
    const bool is_k = col < p.k_dim;
    const int dim = is_k ? p.k_dim : p.v_dim, x = is_k ? col : col - p.k_dim;
    const float* src = is_k ? s.dW : s.dUt;
    float* dst = is_k ? s.dX : s.dY;
    for (int m = 0; m < c.rows; ++m) {
      float acc = 0.0f;
      for (int i = m; i < c.rows; ++i)
        acc += T[i * kBT + m] * src[((c.row + i) * p.heads + h) * dim + x];
      dst[((c.row + m) * p.heads + h) * dim + x] = acc;
    }
  }
};

// Unit = (chunk, head, row i): Z_ij = sum_b dT_ib T_jb.
struct GradZ : StepBase {
  FLAME_HD int64_t Units() const { return ChunkRowUnits(); }
  FLAME_HD void operator()(int64_t u) const {
    const int i = static_cast<int>(u % kBT);
    const int64_t base =
        Mat(p, static_cast<int>(u / kBT / p.heads), static_cast<int>(u / kBT % p.heads));
    const float* dT = s.dT + base;
    const float* T = s.T + base;
    for (int j = 0; j < kBT; ++j) {
      float acc = 0.0f;
      for (int b = 0; b <= (i < j ? i : j); ++b) acc += dT[i * kBT + b] * T[j * kBT + b];
      s.Z[base + i * kBT + j] = acc;
    }
  }
};

// Unit = (chunk, head, row i): dA_ij = -sum_{a >= i} T_ai Z_aj for j < i (A is strictly lower).
struct GradA : StepBase {
  FLAME_HD int64_t Units() const { return ChunkRowUnits(); }
  FLAME_HD void operator()(int64_t u) const {
    const int i = static_cast<int>(u % kBT);
    const int64_t base =
        Mat(p, static_cast<int>(u / kBT / p.heads), static_cast<int>(u / kBT % p.heads));
    const float* T = s.T + base;
    const float* Z = s.Z + base;
    for (int j = 0; j < kBT; ++j) {
      float acc = 0.0f;
      if (j < i) {
        for (int a = i; a < kBT; ++a) acc -= T[a * kBT + i] * Z[a * kBT + j];
      }
      s.dA[base + i * kBT + j] = acc;
    }
  }
};

// Unit = (chunk, head, row i): every gradient of row i:
//   dq_i = scale gamma_i SdO_i + sum_{m<=i} dM_im D_im k_m
//   dk_i = exp(G_L-G_i) dKd_i + sum_{r>=i} dM_ri D_ri q_r + beta_i gamma_i dX_i
//          + sum_{j<i} dA_ij beta_i D_ij k_j + sum_{r>i} dA_ri beta_r D_ri k_r
//   dv_i = beta_i dY_i;   dbeta_i = v_i . dY_i + gamma_i k_i . dX_i + sum_{j<i} dA_ij (k_i.k_j)
//   D_ij dG_i = scale gamma_i q_i . SdO_i + sum_{m<i} P_im - sum_{r>i} P_ri + beta_i gamma_i k_i .
//   dX_i
//          + sum_{j<i} Q_ij - sum_{r>i} Q_ri - exp(G_L-G_i) k_i . dKd_i
//          [last row: + gamma_L <S, dS'> + sum_m exp(G_L-G_m) k_m . dKd_m]
//   with P_im = dM_im (q_i.k_m) D_im and Q_ij = dA_ij beta_i (k_i.k_j) D_ij.
// Then dq, dk go through the l2norm backward and dbeta through the sigmoid.
struct RowGrads : StepBase {
  FLAME_HD int64_t Units() const { return ChunkRowUnits(); }
  FLAME_HD void operator()(int64_t u) const {
    const auto [i, h, chunk, c] = DecodeChunkRow(u);
    if (i >= c.rows) return;
    const int K = p.k_dim, V = p.v_dim;
    const int64_t ri = (c.row + i) * p.heads + h;
    const float* qi = s.qn + ri * K;
    const float* ki = s.kn + ri * K;
    const float* dM = s.dM + Mat(p, chunk, h);
    const float* dA = s.dA + Mat(p, chunk, h);
    const float Gi = s.G[ri], gamma = expf(Gi), beta = s.bt[ri];
    const int64_t r_last = (c.row + c.rows - 1) * p.heads + h;
    const float G_last = s.G[r_last];
    float dq[kMaxK], dk[kMaxK];
    float dG = 0.0f, dbeta = 0.0f;
    // Inter-chunk output, the state update's keys, and the WY inputs X = beta gamma k.
    const float kd = expf(G_last - Gi);
    for (int k = 0; k < K; ++k) {
      dq[k] = p.scale * gamma * s.SdO[ri * K + k];
      dk[k] = kd * s.dKd[ri * K + k] + beta * gamma * s.dX[ri * K + k];
    }
    dG += p.scale * gamma * Dot(qi, s.SdO + ri * K, K) - kd * Dot(ki, s.dKd + ri * K, K);
    const float kdx = gamma * Dot(ki, s.dX + ri * K, K);
    dbeta += kdx;
    dG += beta * kdx;
    // Row i's own products (m, j <= i) and the other rows' products that involve k_i (r > i).
    for (int m = 0; m < c.rows; ++m) {
      const int64_t rm = (c.row + m) * p.heads + h;
      const float* qm = s.qn + rm * K;
      const float* km = s.kn + rm * K;
      if (m <= i) {
        const float D = expf(Gi - s.G[rm]);
        const float wq = dM[i * kBT + m] * D;
        const float wa = m < i ? dA[i * kBT + m] * beta * D : 0.0f;
        for (int k = 0; k < K; ++k) {
          dq[k] += wq * km[k];
          dk[k] += wa * km[k];
        }
        if (m < i) {
          const float kk = Dot(ki, km, K);
          dG += wq * Dot(qi, km, K) + wa * kk;
          dbeta += dA[i * kBT + m] * kk * D;
        }
      }
      if (m >= i) {
        const float D = expf(s.G[rm] - Gi);
        const float wq = dM[m * kBT + i] * D;
        const float wa = m > i ? dA[m * kBT + i] * s.bt[rm] * D : 0.0f;
        for (int k = 0; k < K; ++k) dk[k] += wq * qm[k] + wa * km[k];
        if (m > i) dG -= wq * Dot(qm, ki, K) + wa * Dot(km, ki, K);
      }
    }
    if (i == c.rows - 1) {  // G_L terms: the decay of the carried state and of every key
      const float* S = s.S + State(p, chunk, h);
      const float* dS = s.dS + State(p, chunk, h);
      float sds = 0.0f;
      for (int64_t e = 0; e < int64_t{K} * V; ++e) sds += S[e] * dS[e];
      dG += gamma * sds;
      for (int m = 0; m < c.rows; ++m) {
        const int64_t rm = (c.row + m) * p.heads + h;
        dG += expf(G_last - s.G[rm]) * Dot(s.kn + rm * K, s.dKd + rm * K, K);
      }
    }
    // v: Y = beta v.
    const int64_t vi = In(p.v_strides, c.batch, c.t0 + i, h);
    for (int j = 0; j < V; ++j) {
      const float dy = s.dY[ri * V + j];
      dbeta += Load(p.v, vi + j) * dy;
      p.dv[vi + j] = __float2bfloat16(beta * dy);
    }
    WriteQK(c, i, h, p.q, qi, dq, p.dq);
    WriteQK(c, i, h, p.k, ki, dk, p.dk);
    const int64_t si = In(p.scalar_strides, c.batch, c.t0 + i, h);
    p.dbeta[si] = p.beta_sigmoid ? dbeta * beta * (1.0f - beta) : dbeta;
    s.dG[ri] = dG;
  }

  // The gradient of the raw row x (q or k) from that of its normalised copy y:
  // dx = (dy - y <y, dy>) / sqrt(sum x^2 + eps); y = x and dx = dy without the l2norm.
  FLAME_HD void WriteQK(const Chunk& c, int i, int h, const __nv_bfloat16* x, const float* y,
                        const float* dy, __nv_bfloat16* dx) const {
    const int64_t xi = In(p.qk_strides, c.batch, c.t0 + i, h);
    float rstd = 1.0f, ydy = 0.0f;
    if (p.qk_l2norm) {
      float ss = 0.0f;
      for (int k = 0; k < p.k_dim; ++k) ss += Load(x, xi + k) * Load(x, xi + k);
      rstd = 1.0f / sqrtf(ss + kL2NormEps);
      ydy = Dot(y, dy, p.k_dim);
    }
    for (int k = 0; k < p.k_dim; ++k) {
      dx[xi + k] = __float2bfloat16(p.qk_l2norm ? rstd * (dy[k] - y[k] * ydy) : dy[k]);
    }
  }
};

// Unit = (chunk, head), gated only: dg = reverse chunk-local cumsum of dG (G_i = sum_{t<=i} g_t),
// then da = dg, or dg * -exp(A_log) softplus'(a + dt_bias) with the in-kernel gate.
struct GateGrads : StepBase {
  FLAME_HD int64_t Units() const { return int64_t{TotalChunks(p)} * p.heads; }
  FLAME_HD void operator()(int64_t u) const {
    const int h = static_cast<int>(u % p.heads);
    const Chunk c = LocateChunk(p, static_cast<int>(u / p.heads));
    float acc = 0.0f, sum_dg_g = 0.0f, sum_da = 0.0f;
    for (int i = c.rows - 1; i >= 0; --i) {
      const int64_t ri = (c.row + i) * p.heads + h;
      acc += s.dG[ri];  // dg of row i
      const int64_t si = In(p.scalar_strides, c.batch, c.t0 + i, h);
      float da = acc;
      if (p.gate_in_kernel) {
        const float x = p.a[si] + p.dt_bias[h];
        da = -acc * expf(p.A_log[h]) * (x > kSoftplusThreshold ? 1.0f : Sigmoid(x));
      }
      p.da[si] = da;
      sum_dg_g += acc * s.g[ri];
      sum_da += da;
    }
    s.gate_sums[u * 2] = sum_dg_g;
    s.gate_sums[u * 2 + 1] = sum_da;
  }
};

// Unit = head, gate_in_kernel only: dA_log = sum dg g and ddt_bias = sum da over every token of
// the head, from GateGrads' per-chunk sums in chunk order (deterministic, no atomics).
struct HeadGrads : StepBase {
  FLAME_HD int64_t Units() const { return p.heads; }
  FLAME_HD void operator()(int64_t u) const {
    const int h = static_cast<int>(u);
    float d_alog = 0.0f, d_dt = 0.0f;
    for (int chunk = 0; chunk < TotalChunks(p); ++chunk) {
      const int64_t x = (int64_t{chunk} * p.heads + h) * 2;
      d_alog += s.gate_sums[x];
      d_dt += s.gate_sums[x + 1];
    }
    if (p.dA_log) p.dA_log[h] = d_alog;
    if (p.ddt_bias) p.ddt_bias[h] = d_dt;
  }
};

}  // namespace flame::kernels::delta_chunk
