#include "kernels/delta_rule/delta_rule_reference.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/common/recurrence_slices.h"

namespace flame::kernels {
namespace {

using reference::At;
using reference::Slice;
using reference::Slices;

// The inputs of one (token, head) step.
template <typename Real>
struct Token {
  const Real* k;
  const Real* v;
  Real beta;
  Real alpha;  // exp(g), 1 without a gate
};

template <typename Real>
Token<Real> TokenAt(const RecurrenceShape& s, const Real* k, const Real* v, const Real* beta,
                    const Real* g, int64_t row, int h) {
  const int64_t r = row * s.heads + h;
  return {k + At(row, h, s.heads, s.k_dim), v + At(row, h, s.heads, s.v_dim), beta[r],
          g ? std::exp(g[r]) : Real(1)};
}

// S <- alpha S; u = S^T k; S += beta k (v - u)^T. Leaves u = S'^T k in `u` (V entries).
template <typename Real>
void Step(int K, int V, const Token<Real>& t, Real* S, Real* u) {
  for (int i = 0; i < K * V; ++i) S[i] *= t.alpha;
  for (int j = 0; j < V; ++j) u[j] = 0;
  for (int i = 0; i < K; ++i) {
    for (int j = 0; j < V; ++j) u[j] += S[i * V + j] * t.k[i];
  }
  for (int i = 0; i < K; ++i) {
    const Real bk = t.beta * t.k[i];
    for (int j = 0; j < V; ++j) S[i * V + j] += bk * (t.v[j] - u[j]);
  }
}

}  // namespace

template <typename Real>
void DeltaRecurrenceForward(const RecurrenceShape& shape, Real scale, const Real* q, const Real* k,
                            const Real* v, const Real* beta, const Real* g,
                            const Real* initial_state, Real* o, Real* final_state) {
  const int H = shape.heads, K = shape.k_dim, V = shape.v_dim;
  const size_t KV = static_cast<size_t>(K) * V;
  std::vector<Real> S(KV), u(V);
  for (const Slice& sl : Slices(shape)) {
    for (int h = 0; h < H; ++h) {
      const int64_t state = (int64_t{sl.seq} * H + h) * static_cast<int64_t>(KV);
      if (initial_state) {
        std::copy(initial_state + state, initial_state + state + KV, S.begin());
      } else {
        std::fill(S.begin(), S.end(), Real(0));
      }
      for (int t = 0; t < sl.len; ++t) {
        const int64_t row = sl.first_row + t;
        Step(K, V, TokenAt(shape, k, v, beta, g, row, h), S.data(), u.data());
        const Real* qt = q + At(row, h, H, K);
        Real* ot = o + At(row, h, H, V);
        for (int j = 0; j < V; ++j) {
          Real acc = 0;
          for (int i = 0; i < K; ++i) acc += S[i * V + j] * qt[i];
          ot[j] = scale * acc;
        }
      }
      if (final_state) std::copy(S.begin(), S.end(), final_state + state);
    }
  }
}

// The reverse pass needs S_{t-1} at every step. States are checkpointed every kSegment tokens in a
// forward sweep and each segment is recomputed before it is walked backwards, so memory stays
// O(kSegment * K * V) whatever the sequence length. Per token, with S' = alpha S_{t-1},
// u = S'^T k, e = v - u and S_t = S' + beta k e^T (dS is the gradient of S_t):
//   dq = scale S_t do                  dS += scale q do^T (first)
//   dv = de = beta dS^T k              dbeta = k^T dS e
//   dk = beta dS e - S' de             dS' = dS - k de^T
//   dg = <dS', S'>                     dS_{t-1} = alpha dS'
template <typename Real>
void DeltaRecurrenceBackward(const RecurrenceShape& shape, Real scale, const Real* q, const Real* k,
                             const Real* v, const Real* beta, const Real* g,
                             const Real* initial_state, const Real* d_o, const Real* d_final_state,
                             Real* dq, Real* dk, Real* dv, Real* dbeta, Real* dg,
                             Real* d_initial_state) {
  constexpr int kSegment = 64;
  const int H = shape.heads, K = shape.k_dim, V = shape.v_dim;
  const size_t KV = static_cast<size_t>(K) * V;
  std::vector<Real> dS(KV), S_prime(KV), u(V), e(V), de(V), w(K);
  for (const Slice& sl : Slices(shape)) {
    for (int h = 0; h < H; ++h) {
      const int64_t state = (int64_t{sl.seq} * H + h) * static_cast<int64_t>(KV);
      const int segments = (sl.len + kSegment - 1) / kSegment;
      // checkpoints[s] = state before token s * kSegment.
      std::vector<Real> checkpoints((segments + 1) * KV, Real(0));
      if (initial_state) {
        std::copy(initial_state + state, initial_state + state + KV, checkpoints.begin());
      }
      for (int s = 0; s < segments; ++s) {
        Real* S = checkpoints.data() + (s + 1) * KV;
        std::copy(S - KV, S, S);
        for (int t = s * kSegment; t < std::min(sl.len, (s + 1) * kSegment); ++t) {
          Step(K, V, TokenAt(shape, k, v, beta, g, sl.first_row + t, h), S, u.data());
        }
      }
      if (d_final_state) {
        std::copy(d_final_state + state, d_final_state + state + KV, dS.begin());
      } else {
        std::fill(dS.begin(), dS.end(), Real(0));
      }
      // states[i] = S after token (segment start + i - 1); states[0] = the checkpoint.
      std::vector<Real> states((kSegment + 1) * KV);
      for (int s = segments - 1; s >= 0; --s) {
        const int t0 = s * kSegment, t1 = std::min(sl.len, (s + 1) * kSegment);
        std::copy(checkpoints.begin() + s * KV, checkpoints.begin() + (s + 1) * KV, states.begin());
        for (int t = t0; t < t1; ++t) {
          Real* S = states.data() + (t - t0 + 1) * KV;
          std::copy(S - KV, S, S);
          Step(K, V, TokenAt(shape, k, v, beta, g, sl.first_row + t, h), S, u.data());
        }
        for (int t = t1 - 1; t >= t0; --t) {
          const int64_t row = sl.first_row + t;
          const Token<Real> tok = TokenAt(shape, k, v, beta, g, row, h);
          const Real* S_t = states.data() + (t - t0 + 1) * KV;
          const Real* S_prev = S_t - KV;
          const Real* qt = q + At(row, h, H, K);
          const Real* dot = d_o + At(row, h, H, V);
          // Recompute S' and e = v - S'^T k.
          for (size_t i = 0; i < KV; ++i) S_prime[i] = tok.alpha * S_prev[i];
          for (int j = 0; j < V; ++j) {
            Real acc = 0;
            for (int i = 0; i < K; ++i) acc += S_prime[i * V + j] * tok.k[i];
            e[j] = tok.v[j] - acc;
          }
          // o_t = scale S_t^T q_t.
          for (int i = 0; i < K; ++i) {
            Real acc = 0;
            for (int j = 0; j < V; ++j) {
              acc += S_t[i * V + j] * dot[j];
              dS[i * V + j] += scale * qt[i] * dot[j];
            }
            dq[At(row, h, H, K) + i] = scale * acc;
          }
          // S_t = S' + beta k e^T.
          for (int j = 0; j < V; ++j) {
            Real acc = 0;
            for (int i = 0; i < K; ++i) acc += dS[i * V + j] * tok.k[i];
            de[j] = tok.beta * acc;
            dv[At(row, h, H, V) + j] = de[j];
          }
          Real d_beta = 0;
          for (int i = 0; i < K; ++i) {
            Real acc_w = 0, acc_u = 0;
            for (int j = 0; j < V; ++j) {
              acc_w += dS[i * V + j] * e[j];
              acc_u += S_prime[i * V + j] * de[j];
            }
            d_beta += tok.k[i] * acc_w;
            dk[At(row, h, H, K) + i] = tok.beta * acc_w - acc_u;
          }
          dbeta[row * H + h] = d_beta;
          // dS' = dS - k de^T; dg = <dS', S'>; dS_{t-1} = alpha dS'.
          Real d_gate = 0;
          for (int i = 0; i < K; ++i) {
            for (int j = 0; j < V; ++j) {
              Real& d = dS[i * V + j];
              d -= tok.k[i] * de[j];
              d_gate += d * S_prime[i * V + j];
              d *= tok.alpha;
            }
          }
          if (dg) dg[row * H + h] = d_gate;
        }
      }
      if (d_initial_state) std::copy(dS.begin(), dS.end(), d_initial_state + state);
    }
  }
}

template <typename Real>
void L2NormRows(const Real* x, int64_t rows, int dim, Real* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const Real* xr = x + r * dim;
    Real ss = 0;
    for (int c = 0; c < dim; ++c) ss += xr[c] * xr[c];
    const Real rstd = Real(1) / std::sqrt(ss + Real(kDeltaL2NormEps));
    for (int c = 0; c < dim; ++c) y[r * dim + c] = xr[c] * rstd;
  }
}

// y = x r with r = (sum x^2 + eps)^-1/2:  dx = r (dy - y <y, dy>).
template <typename Real>
void L2NormRowsBackward(const Real* x, const Real* dy, int64_t rows, int dim, Real* dx) {
  for (int64_t r = 0; r < rows; ++r) {
    const Real* xr = x + r * dim;
    const Real* dyr = dy + r * dim;
    Real ss = 0, dot = 0;
    for (int c = 0; c < dim; ++c) ss += xr[c] * xr[c];
    const Real rstd = Real(1) / std::sqrt(ss + Real(kDeltaL2NormEps));
    for (int c = 0; c < dim; ++c) dot += xr[c] * rstd * dyr[c];
    for (int c = 0; c < dim; ++c) dx[r * dim + c] = rstd * (dyr[c] - xr[c] * rstd * dot);
  }
}

namespace {

// q and k as the recurrence sees them: L2-normalised copies, or the inputs themselves.
template <typename Real>
struct NormalizedQK {
  std::vector<Real> q, k;
  const Real* q_ptr;
  const Real* k_ptr;

  NormalizedQK(const RecurrenceShape& s, bool l2norm, const Real* q_in, const Real* k_in)
      : q_ptr(q_in), k_ptr(k_in) {
    if (!l2norm) return;
    const int64_t rows = int64_t{s.batch} * s.seq_len * s.heads;
    q.resize(rows * s.k_dim);
    k.resize(rows * s.k_dim);
    L2NormRows(q_in, rows, s.k_dim, q.data());
    L2NormRows(k_in, rows, s.k_dim, k.data());
    q_ptr = q.data();
    k_ptr = k.data();
  }
};

}  // namespace

template <typename Real>
void DeltaRuleReferenceForward(const RecurrenceShape& shape, bool qk_l2norm, Real scale,
                               const Real* q, const Real* k, const Real* v, const Real* beta,
                               const Real* initial_state, Real* o, Real* final_state) {
  const NormalizedQK<Real> qk(shape, qk_l2norm, q, k);
  DeltaRecurrenceForward<Real>(shape, scale, qk.q_ptr, qk.k_ptr, v, beta, nullptr, initial_state, o,
                               final_state);
}

template <typename Real>
void DeltaRuleReferenceBackward(const RecurrenceShape& shape, bool qk_l2norm, Real scale,
                                const Real* q, const Real* k, const Real* v, const Real* beta,
                                const Real* initial_state, const Real* d_o,
                                const Real* d_final_state, Real* dq, Real* dk, Real* dv,
                                Real* dbeta, Real* d_initial_state) {
  const NormalizedQK<Real> qk(shape, qk_l2norm, q, k);
  DeltaRecurrenceBackward<Real>(shape, scale, qk.q_ptr, qk.k_ptr, v, beta, nullptr, initial_state,
                                d_o, d_final_state, dq, dk, dv, dbeta, nullptr, d_initial_state);
  if (!qk_l2norm) return;
  const int64_t rows = int64_t{shape.batch} * shape.seq_len * shape.heads;
  std::vector<Real> d_normed(dq, dq + rows * shape.k_dim);
  L2NormRowsBackward(q, d_normed.data(), rows, shape.k_dim, dq);
  d_normed.assign(dk, dk + rows * shape.k_dim);
  L2NormRowsBackward(k, d_normed.data(), rows, shape.k_dim, dk);
}

#define FLAME_INSTANTIATE_DELTA_REFERENCE(Real)                                                    \
  template void DeltaRecurrenceForward<Real>(const RecurrenceShape&, Real, const Real*,            \
                                             const Real*, const Real*, const Real*, const Real*,   \
                                             const Real*, Real*, Real*);                           \
  template void DeltaRecurrenceBackward<Real>(const RecurrenceShape&, Real, const Real*,           \
                                              const Real*, const Real*, const Real*, const Real*,  \
                                              const Real*, const Real*, const Real*, Real*, Real*, \
                                              Real*, Real*, Real*, Real*);                         \
  template void L2NormRows<Real>(const Real*, int64_t, int, Real*);                                \
  template void L2NormRowsBackward<Real>(const Real*, const Real*, int64_t, int, Real*);           \
  template void DeltaRuleReferenceForward<Real>(const RecurrenceShape&, bool, Real, const Real*,   \
                                                const Real*, const Real*, const Real*,             \
                                                const Real*, Real*, Real*);                        \
  template void DeltaRuleReferenceBackward<Real>(                                                  \
      const RecurrenceShape&, bool, Real, const Real*, const Real*, const Real*, const Real*,      \
      const Real*, const Real*, const Real*, Real*, Real*, Real*, Real*, Real*);

FLAME_INSTANTIATE_DELTA_REFERENCE(float)
FLAME_INSTANTIATE_DELTA_REFERENCE(double)
#undef FLAME_INSTANTIATE_DELTA_REFERENCE

}  // namespace flame::kernels
