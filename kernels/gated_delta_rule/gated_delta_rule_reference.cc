#include "kernels/gated_delta_rule/gated_delta_rule_reference.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/delta_rule/delta_rule_reference.h"

namespace flame::kernels {
namespace {

constexpr double kSoftplusThreshold = 20;  // softplus(x) = x above it, as in fla

template <typename Real>
Real Softplus(Real x) {
  return x > Real(kSoftplusThreshold) ? x : std::log1p(std::exp(x));
}

// d softplus / dx: sigmoid(x), and exactly 1 where softplus is the identity.
template <typename Real>
Real SoftplusGrad(Real x) {
  return x > Real(kSoftplusThreshold) ? Real(1) : Real(1) / (Real(1) + std::exp(-x));
}

template <typename Real>
Real Sigmoid(Real x) {
  return Real(1) / (Real(1) + std::exp(-x));
}

int64_t Rows(const RecurrenceShape& s) { return int64_t{s.batch} * s.seq_len * s.heads; }

// q and k as the recurrence sees them, with g and beta.
template <typename Real>
struct Prepared {
  std::vector<Real> q, k, g, beta;
  const Real* q_ptr;
  const Real* k_ptr;

  Prepared(const RecurrenceShape& s, const GatedDeltaRuleOptions& o,
           const GatedDeltaRuleInputs<Real>& in)
      : g(Rows(s)), beta(Rows(s)), q_ptr(in.q), k_ptr(in.k) {
    GatedDeltaRuleGateAndBeta(s, o, in, g.data(), beta.data());
    if (!o.qk_l2norm) return;
    q.resize(Rows(s) * s.k_dim);
    k.resize(Rows(s) * s.k_dim);
    L2NormRows(in.q, Rows(s), s.k_dim, q.data());
    L2NormRows(in.k, Rows(s), s.k_dim, k.data());
    q_ptr = q.data();
    k_ptr = k.data();
  }
};

}  // namespace

template <typename Real>
void GatedDeltaRuleGateAndBeta(const RecurrenceShape& shape, const GatedDeltaRuleOptions& options,
                               const GatedDeltaRuleInputs<Real>& in, Real* g, Real* beta) {
  for (int64_t r = 0; r < Rows(shape); ++r) {
    const int h = static_cast<int>(r % shape.heads);
    g[r] = options.gate_in_kernel ? -std::exp(in.A_log[h]) * Softplus(in.a[r] + in.dt_bias[h])
                                  : in.a[r];
    beta[r] = options.beta_sigmoid ? Sigmoid(in.b[r]) : in.b[r];
  }
}

template <typename Real>
void GatedDeltaRuleReferenceForward(const RecurrenceShape& shape,
                                    const GatedDeltaRuleOptions& options, Real scale,
                                    const GatedDeltaRuleInputs<Real>& in, Real* o,
                                    Real* final_state) {
  const Prepared<Real> p(shape, options, in);
  DeltaRecurrenceForward<Real>(shape, scale, p.q_ptr, p.k_ptr, in.v, p.beta.data(), p.g.data(),
                               in.initial_state, o, final_state);
}

// The chain rule through the transforms, per token r of head h:
//   g = -exp(A_log) softplus(x), x = a + dt_bias:  da = -dg exp(A_log) softplus'(x),
//       ddt_bias[h] += da, dA_log[h] += dg g  (dg/dA_log = g);
//   beta = sigmoid(b):  db = dbeta beta (1 - beta);  q, k: the l2norm backward.
template <typename Real>
void GatedDeltaRuleReferenceBackward(const RecurrenceShape& shape,
                                     const GatedDeltaRuleOptions& options, Real scale,
                                     const GatedDeltaRuleInputs<Real>& in, const Real* d_o,
                                     const Real* d_final_state,
                                     const GatedDeltaRuleGrads<Real>& grads) {
  const Prepared<Real> p(shape, options, in);
  const int64_t rows = Rows(shape);
  std::vector<Real> dq(rows * shape.k_dim), dk(rows * shape.k_dim), dv(rows * shape.v_dim),
      dbeta(rows), dg(rows);
  DeltaRecurrenceBackward<Real>(shape, scale, p.q_ptr, p.k_ptr, in.v, p.beta.data(), p.g.data(),
                                in.initial_state, d_o, d_final_state, dq.data(), dk.data(),
                                dv.data(), dbeta.data(), dg.data(), grads.d_initial_state);
  if (grads.dq) {
    if (options.qk_l2norm) {
      L2NormRowsBackward(in.q, dq.data(), rows, shape.k_dim, grads.dq);
    } else {
      std::copy(dq.begin(), dq.end(), grads.dq);
    }
  }
  if (grads.dk) {
    if (options.qk_l2norm) {
      L2NormRowsBackward(in.k, dk.data(), rows, shape.k_dim, grads.dk);
    } else {
      std::copy(dk.begin(), dk.end(), grads.dk);
    }
  }
  if (grads.dv) std::copy(dv.begin(), dv.end(), grads.dv);
  if (grads.dA_log) std::fill(grads.dA_log, grads.dA_log + shape.heads, Real(0));
  if (grads.ddt_bias) std::fill(grads.ddt_bias, grads.ddt_bias + shape.heads, Real(0));
  for (int64_t r = 0; r < rows; ++r) {
    const int h = static_cast<int>(r % shape.heads);
    if (grads.db) {
      const Real beta = p.beta[r];
      grads.db[r] = options.beta_sigmoid ? dbeta[r] * beta * (Real(1) - beta) : dbeta[r];
    }
    if (!options.gate_in_kernel) {
      if (grads.da) grads.da[r] = dg[r];
      continue;
    }
    const Real dx = -dg[r] * std::exp(in.A_log[h]) * SoftplusGrad(in.a[r] + in.dt_bias[h]);
    if (grads.da) grads.da[r] = dx;
    if (grads.ddt_bias) grads.ddt_bias[h] += dx;
    if (grads.dA_log) grads.dA_log[h] += dg[r] * p.g[r];
  }
}

#define FLAME_INSTANTIATE_GDN_REFERENCE(Real)                                                     \
  template void GatedDeltaRuleGateAndBeta<Real>(const RecurrenceShape&,                           \
                                                const GatedDeltaRuleOptions&,                     \
                                                const GatedDeltaRuleInputs<Real>&, Real*, Real*); \
  template void GatedDeltaRuleReferenceForward<Real>(                                             \
      const RecurrenceShape&, const GatedDeltaRuleOptions&, Real,                                 \
      const GatedDeltaRuleInputs<Real>&, Real*, Real*);                                           \
  template void GatedDeltaRuleReferenceBackward<Real>(                                            \
      const RecurrenceShape&, const GatedDeltaRuleOptions&, Real,                                 \
      const GatedDeltaRuleInputs<Real>&, const Real*, const Real*,                                \
      const GatedDeltaRuleGrads<Real>&);

FLAME_INSTANTIATE_GDN_REFERENCE(float)
FLAME_INSTANTIATE_GDN_REFERENCE(double)
#undef FLAME_INSTANTIATE_GDN_REFERENCE

}  // namespace flame::kernels
