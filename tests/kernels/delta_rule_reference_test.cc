// The naive-recurrence references of chunk_delta_rule and chunk_gated_delta_rule, which every
// delta-rule kernel is tested against: their reverse passes must be the gradients of their forward
// passes. Central differences in double precision, for every input (q, k, v, beta or its logits,
// the gate input a, A_log, dt_bias, initial state), over sequences longer than one 64-token
// recomputation segment and not a multiple of 64, varlen batches with odd lengths, and strong and
// weak decays. CPU only (runs in CI).
#include "kernels/delta_rule/delta_rule_reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/gated_delta_rule/gated_delta_rule_reference.h"

namespace flame::kernels {
namespace {

using Vec = std::vector<double>;

Vec Normal(size_t n, std::mt19937& rng, double mean = 0, double stddev = 1) {
  std::normal_distribution<double> dist(mean, stddev);
  Vec out(n);
  for (double& x : out) x = dist(rng);
  return out;
}

double Dot(const Vec& a, const Vec& b) {
  double acc = 0;
  for (size_t i = 0; i < a.size(); ++i) acc += a[i] * b[i];
  return acc;
}

// Checks grad against central differences of loss() in x, every element. Names the first
// mismatches.
void ExpectGradient(const std::function<double()>& loss, Vec& x, const Vec& grad,
                    const std::string& name) {
  constexpr double kEps = 1e-6;
  ASSERT_EQ(x.size(), grad.size()) << name;
  int failures = 0;
  for (size_t i = 0; i < x.size() && failures < 5; ++i) {
    const double saved = x[i];
    x[i] = saved + kEps;
    const double up = loss();
    x[i] = saved - kEps;
    const double down = loss();
    x[i] = saved;
    const double numeric = (up - down) / (2 * kEps);
    const bool ok = std::fabs(grad[i] - numeric) <= 1e-6 * (1 + std::fabs(numeric));
    EXPECT_TRUE(ok) << name << "[" << i << "]: analytic " << grad[i] << ", numeric " << numeric;
    failures += ok ? 0 : 1;
  }
}

// Shapes: H = 2 heads, K = 4, V = 3; lengths 71 (crosses a segment, not a multiple of 64) or a
// packed batch of odd lengths 1, 66, 5.
RecurrenceShape DenseShape() { return {2, 71, 2, 4, 3, {}}; }
RecurrenceShape VarlenShape() { return {1, 72, 2, 4, 3, {0, 1, 67, 72}}; }

size_t Rows(const RecurrenceShape& s) { return size_t{1} * s.batch * s.seq_len * s.heads; }
size_t States(const RecurrenceShape& s) {
  return size_t{1} * s.NumSeqs() * s.heads * s.k_dim * s.v_dim;
}

// ---------------------------------------------------------------------------------------------
// chunk_delta_rule

struct DeltaProblem {
  RecurrenceShape shape;
  bool l2norm;
  double scale = 0.5;
  Vec q, k, v, beta, h0, w_o, w_ht;  // w_*: weights of the scalar loss

  DeltaProblem(const RecurrenceShape& s, bool qk_l2norm, uint32_t seed)
      : shape(s), l2norm(qk_l2norm) {
    std::mt19937 rng(seed);
    const size_t rows = Rows(s);
    q = Normal(rows * s.k_dim, rng);
    k = Normal(rows * s.k_dim, rng);
    if (!l2norm) {  // the bare recurrence is only stable for unit keys, as the layer guarantees
      L2NormRows(k.data(), static_cast<int64_t>(rows), s.k_dim, k.data());
    }
    v = Normal(rows * s.v_dim, rng);
    beta = Normal(rows, rng);
    for (double& b : beta) b = 1 / (1 + std::exp(-b));
    h0 = Normal(States(s), rng);
    w_o = Normal(rows * s.v_dim, rng);
    w_ht = Normal(States(s), rng);
  }

  // L = <o, w_o> + <final_state, w_ht>
  double Loss() const {
    Vec o(v.size()), ht(h0.size());
    DeltaRuleReferenceForward<double>(shape, l2norm, scale, q.data(), k.data(), v.data(),
                                      beta.data(), h0.data(), o.data(), ht.data());
    return Dot(o, w_o) + Dot(ht, w_ht);
  }
};

void CheckDeltaRule(const RecurrenceShape& shape, bool l2norm, uint32_t seed) {
  DeltaProblem p(shape, l2norm, seed);
  Vec dq(p.q.size()), dk(p.k.size()), dv(p.v.size()), dbeta(p.beta.size()), dh0(p.h0.size());
  DeltaRuleReferenceBackward<double>(p.shape, l2norm, p.scale, p.q.data(), p.k.data(), p.v.data(),
                                     p.beta.data(), p.h0.data(), p.w_o.data(), p.w_ht.data(),
                                     dq.data(), dk.data(), dv.data(), dbeta.data(), dh0.data());
  const auto loss = [&p] { return p.Loss(); };
  ExpectGradient(loss, p.q, dq, "dq");
  ExpectGradient(loss, p.k, dk, "dk");
  ExpectGradient(loss, p.v, dv, "dv");
  ExpectGradient(loss, p.beta, dbeta, "dbeta");
  ExpectGradient(loss, p.h0, dh0, "dh0");
}

TEST(DeltaRuleReference, BackwardIsTheGradientOfForwardWithL2Norm) {
  CheckDeltaRule(DenseShape(), true, 1);
}

TEST(DeltaRuleReference, BackwardIsTheGradientOfForwardWithoutL2Norm) {
  CheckDeltaRule(DenseShape(), false, 2);
}

TEST(DeltaRuleReference, BackwardIsTheGradientOfForwardOverOddVarlenSequences) {
  CheckDeltaRule(VarlenShape(), true, 3);
}

TEST(DeltaRuleReference, UnitBetaOverwritesTheStoredValueOfAUnitKey) {
  // With beta = 1 and |k| = 1 the delta rule replaces what S stores for k: S_t^T k_t = v_t.
  RecurrenceShape shape{1, 3, 1, 4, 2, {}};
  std::mt19937 rng(4);
  Vec q(12), k = Normal(12, rng), v = Normal(6, rng), beta(3, 1.0), h0 = Normal(8, rng);
  for (int t = 0; t < 3; ++t) {  // exact unit keys (L2NormRows adds eps), queried with themselves
    const double norm = std::sqrt(Dot(Vec(k.begin() + t * 4, k.begin() + t * 4 + 4),
                                      Vec(k.begin() + t * 4, k.begin() + t * 4 + 4)));
    for (int i = 0; i < 4; ++i) q[t * 4 + i] = k[t * 4 + i] /= norm;
  }
  Vec o(6);
  DeltaRecurrenceForward<double>(shape, 1.0, q.data(), k.data(), v.data(), beta.data(), nullptr,
                                 h0.data(), o.data(), nullptr);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(o[i], v[i], 1e-12) << i;
}

// ---------------------------------------------------------------------------------------------
// chunk_gated_delta_rule

struct GatedProblem {
  RecurrenceShape shape;
  GatedDeltaRuleOptions options;
  double scale = 0.5;
  Vec q, k, v, a, b, A_log, dt_bias, h0, w_o, w_ht;

  // decay_log_scale: A_log = decay_log_scale + N(0, 0.3); large values give strong decays.
  GatedProblem(const RecurrenceShape& s, const GatedDeltaRuleOptions& o, double decay_log_scale,
               uint32_t seed)
      : shape(s), options(o) {
    std::mt19937 rng(seed);
    const size_t rows = Rows(s);
    q = Normal(rows * s.k_dim, rng);
    k = Normal(rows * s.k_dim, rng);
    if (!o.qk_l2norm) L2NormRows(k.data(), static_cast<int64_t>(rows), s.k_dim, k.data());
    v = Normal(rows * s.v_dim, rng);
    a = Normal(rows, rng);
    if (!o.gate_in_kernel) {  // a is the log decay itself
      for (double& x : a) x = -std::log1p(std::exp(-x));
    }
    b = Normal(rows, rng);
    if (!o.beta_sigmoid) {
      for (double& x : b) x = 1 / (1 + std::exp(-x));
    }
    A_log = Normal(s.heads, rng, decay_log_scale, 0.3);
    dt_bias = Normal(s.heads, rng, -1, 0.5);
    h0 = Normal(States(s), rng);
    w_o = Normal(rows * s.v_dim, rng);
    w_ht = Normal(States(s), rng);
  }

  GatedDeltaRuleInputs<double> Inputs() const {
    return {q.data(), k.data(),     v.data(),       a.data(),
            b.data(), A_log.data(), dt_bias.data(), h0.data()};
  }

  double Loss() const {
    Vec o(v.size()), ht(h0.size());
    GatedDeltaRuleReferenceForward<double>(shape, options, scale, Inputs(), o.data(), ht.data());
    return Dot(o, w_o) + Dot(ht, w_ht);
  }
};

void CheckGatedDeltaRule(GatedProblem& p) {
  Vec dq(p.q.size()), dk(p.k.size()), dv(p.v.size()), da(p.a.size()), db(p.b.size()),
      dA_log(p.A_log.size()), ddt_bias(p.dt_bias.size()), dh0(p.h0.size());
  GatedDeltaRuleGrads<double> grads{dq.data(), dk.data(),     dv.data(),       da.data(),
                                    db.data(), dA_log.data(), ddt_bias.data(), dh0.data()};
  GatedDeltaRuleReferenceBackward<double>(p.shape, p.options, p.scale, p.Inputs(), p.w_o.data(),
                                          p.w_ht.data(), grads);
  const auto loss = [&p] { return p.Loss(); };
  ExpectGradient(loss, p.q, dq, "dq");
  ExpectGradient(loss, p.k, dk, "dk");
  ExpectGradient(loss, p.v, dv, "dv");
  ExpectGradient(loss, p.a, da, "da");
  ExpectGradient(loss, p.b, db, "db");
  ExpectGradient(loss, p.h0, dh0, "dh0");
  if (p.options.gate_in_kernel) {
    ExpectGradient(loss, p.A_log, dA_log, "dA_log");
    ExpectGradient(loss, p.dt_bias, ddt_bias, "ddt_bias");
  }
}

TEST(GatedDeltaRuleReference, BackwardIsTheGradientOfForwardWithTheLayerOptions) {
  GatedProblem p(DenseShape(), {}, 0.0, 11);  // exp(A_log) ~ 1: moderate decay
  CheckGatedDeltaRule(p);
}

TEST(GatedDeltaRuleReference, BackwardIsTheGradientOfForwardWithStrongDecay) {
  GatedProblem p(VarlenShape(), {}, std::log(10.0), 12);  // g ~ -13 per token
  for (double& x : p.a) x += 2;
  CheckGatedDeltaRule(p);
}

TEST(GatedDeltaRuleReference, BackwardIsTheGradientOfForwardWithWeakDecay) {
  GatedProblem p(VarlenShape(), {}, std::log(0.01), 13);  // g ~ -0.003 per token
  CheckGatedDeltaRule(p);
}

TEST(GatedDeltaRuleReference, BackwardIsTheGradientOfForwardWithoutInKernelTransforms) {
  GatedProblem p(DenseShape(), {false, false, false}, 0.0, 14);
  CheckGatedDeltaRule(p);
}

TEST(GatedDeltaRuleReference, SoftplusIsTheIdentityAboveTwenty) {
  // a + dt_bias > 20 takes fla's linear branch: g = -exp(A_log) (a + dt_bias), dg/da = -exp(A_log).
  RecurrenceShape shape{1, 2, 1, 4, 2, {}};
  GatedDeltaRuleOptions options;
  const Vec a{25.0, 30.0}, A_log{std::log(0.5)}, dt_bias{1.0}, b{0.0, 0.0};
  Vec g(2), beta(2);
  GatedDeltaRuleInputs<double> in;
  in.a = a.data();
  in.b = b.data();
  in.A_log = A_log.data();
  in.dt_bias = dt_bias.data();
  GatedDeltaRuleGateAndBeta<double>(shape, options, in, g.data(), beta.data());
  EXPECT_DOUBLE_EQ(g[0], -0.5 * 26.0);
  EXPECT_DOUBLE_EQ(g[1], -0.5 * 31.0);
  EXPECT_DOUBLE_EQ(beta[0], 0.5);
}

TEST(GatedDeltaRuleReference, NoDecayAndGivenBetaIsTheDeltaRule) {
  const RecurrenceShape shape = VarlenShape();
  GatedProblem p(shape, {true, false, false}, 0.0, 15);
  std::fill(p.a.begin(), p.a.end(), 0.0);  // g = 0: no decay
  Vec o_gated(p.v.size()), ht_gated(p.h0.size()), o(p.v.size()), ht(p.h0.size());
  GatedDeltaRuleReferenceForward<double>(shape, p.options, p.scale, p.Inputs(), o_gated.data(),
                                         ht_gated.data());
  DeltaRuleReferenceForward<double>(shape, true, p.scale, p.q.data(), p.k.data(), p.v.data(),
                                    p.b.data(), p.h0.data(), o.data(), ht.data());
  for (size_t i = 0; i < o.size(); ++i) EXPECT_DOUBLE_EQ(o_gated[i], o[i]) << i;
  for (size_t i = 0; i < ht.size(); ++i) EXPECT_DOUBLE_EQ(ht_gated[i], ht[i]) << i;
}

TEST(GatedDeltaRuleReference, FloatInstantiationTracksDouble) {
  // The GPU tests compare against the float reference at head dim 64 over 130 tokens: its own
  // error must sit far below their 5e-3 bar.
  RecurrenceShape shape{1, 130, 1, 64, 64, {}};
  GatedProblem p(shape, {}, 0.0, 16);
  std::vector<float> qf(p.q.begin(), p.q.end()), kf(p.k.begin(), p.k.end()),
      vf(p.v.begin(), p.v.end()), af(p.a.begin(), p.a.end()), bf(p.b.begin(), p.b.end()),
      A_logf(p.A_log.begin(), p.A_log.end()), dtf(p.dt_bias.begin(), p.dt_bias.end()),
      h0f(p.h0.begin(), p.h0.end()), of(p.v.size()), dof(p.w_o.begin(), p.w_o.end()),
      dkf(p.k.size()), daf(p.a.size());
  GatedDeltaRuleInputs<float> inf{qf.data(), kf.data(),     vf.data(),  af.data(),
                                  bf.data(), A_logf.data(), dtf.data(), h0f.data()};
  GatedDeltaRuleReferenceForward<float>(shape, p.options, 0.125f, inf, of.data(), nullptr);
  GatedDeltaRuleGrads<float> gf;
  gf.dk = dkf.data();
  gf.da = daf.data();
  GatedDeltaRuleReferenceBackward<float>(shape, p.options, 0.125f, inf, dof.data(), nullptr, gf);
  Vec o(p.v.size()), dk(p.k.size()), da(p.a.size());
  GatedDeltaRuleReferenceForward<double>(shape, p.options, 0.125, p.Inputs(), o.data(), nullptr);
  GatedDeltaRuleGrads<double> gd;
  gd.dk = dk.data();
  gd.da = da.data();
  GatedDeltaRuleReferenceBackward<double>(shape, p.options, 0.125, p.Inputs(), p.w_o.data(),
                                          nullptr, gd);
  const auto rel_rms = [](const std::vector<float>& x, const Vec& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      num += (x[i] - ref[i]) * (x[i] - ref[i]);
      den += ref[i] * ref[i];
    }
    return std::sqrt(num / den);
  };
  EXPECT_LT(rel_rms(of, o), 1e-5);
  EXPECT_LT(rel_rms(dkf, dk), 1e-5);
  EXPECT_LT(rel_rms(daf, da), 1e-5);
}

}  // namespace
}  // namespace flame::kernels
