// The naive-recurrence reference that every gated chunk kernel is tested against: its reverse
// pass must be the gradient of its forward pass. Checked by central differences in double
// precision on a small varlen problem, for every input (q, k, v, g, initial state). CPU only.
#include "kernels/common/gated_recurrence_reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/simple_gla/chunk_simple_gla_reference.h"

namespace flame::kernels {
namespace {

struct Problem {
  RecurrenceShape shape{1, 9, 2, 3, 2, {0, 2, 9}};  // two sequences: lengths 2 and 7
  double scale = 0.7;
  std::vector<double> q, k, v, g, h0, w_o, w_ht;  // w_*: weights of the scalar loss

  explicit Problem(uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<double> normal(0.0, 1.0);
    const size_t rows = 9 * 2, states = 2 * 2 * 3 * 2;
    auto fill = [&](std::vector<double>& x, size_t n) {
      x.resize(n);
      for (double& e : x) e = normal(rng);
    };
    fill(q, rows * 3);
    fill(k, rows * 3);
    fill(v, rows * 2);
    fill(g, rows * 3);
    for (double& e : g) e = -std::log1p(std::exp(-e));  // logsigmoid: a decay in (0, 1)
    fill(h0, states);
    fill(w_o, rows * 2);
    fill(w_ht, states);
  }

  // L = sum(o * w_o) + sum(final_state * w_ht)
  double Loss() const {
    std::vector<double> o(v.size()), ht(h0.size());
    GatedRecurrenceForward<double>(shape, scale, q.data(), k.data(), v.data(), g.data(), h0.data(),
                                   o.data(), ht.data());
    double loss = 0;
    for (size_t i = 0; i < o.size(); ++i) loss += o[i] * w_o[i];
    for (size_t i = 0; i < ht.size(); ++i) loss += ht[i] * w_ht[i];
    return loss;
  }
};

void ExpectGradientMatches(Problem& p, std::vector<double>& x, const std::vector<double>& grad,
                           const char* name) {
  constexpr double kEps = 1e-6;
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + kEps;
    const double up = p.Loss();
    x[i] = saved - kEps;
    const double down = p.Loss();
    x[i] = saved;
    const double numeric = (up - down) / (2 * kEps);
    EXPECT_NEAR(grad[i], numeric, 1e-6 * (1 + std::fabs(numeric))) << name << "[" << i << "]";
  }
}

TEST(GatedRecurrenceReference, BackwardIsTheGradientOfForward) {
  Problem p(7);
  std::vector<double> dq(p.q.size()), dk(p.k.size()), dv(p.v.size()), dg(p.g.size()),
      dh0(p.h0.size());
  GatedRecurrenceBackward<double>(p.shape, p.scale, p.q.data(), p.k.data(), p.v.data(), p.g.data(),
                                  p.h0.data(), p.w_o.data(), p.w_ht.data(), dq.data(), dk.data(),
                                  dv.data(), dg.data(), dh0.data());
  ExpectGradientMatches(p, p.q, dq, "dq");
  ExpectGradientMatches(p, p.k, dk, "dk");
  ExpectGradientMatches(p, p.v, dv, "dv");
  ExpectGradientMatches(p, p.g, dg, "dg");
  ExpectGradientMatches(p, p.h0, dh0, "dh0");
}

TEST(GatedRecurrenceReference, SegmentedReversePassMatchesAcrossSegmentBoundaries) {
  // 150 tokens span three 64-token recomputation segments; one step of the reverse pass at a
  // segment edge must agree with a direct finite difference.
  RecurrenceShape shape{1, 150, 1, 2, 2, {}};
  std::mt19937 rng(3);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> q(300), k(300), v(300), g(300), w(300);
  for (auto* x : {&q, &k, &v, &g, &w}) {
    for (double& e : *x) e = normal(rng);
  }
  for (double& e : g) e = -std::log1p(std::exp(-e)) / 8;
  auto loss = [&]() {
    std::vector<double> o(300);
    GatedRecurrenceForward<double>(shape, 1.0, q.data(), k.data(), v.data(), g.data(), nullptr,
                                   o.data(), nullptr);
    double l = 0;
    for (size_t i = 0; i < o.size(); ++i) l += o[i] * w[i];
    return l;
  };
  std::vector<double> dq(300), dk(300), dv(300), dg(300);
  GatedRecurrenceBackward<double>(shape, 1.0, q.data(), k.data(), v.data(), g.data(), nullptr,
                                  w.data(), nullptr, dq.data(), dk.data(), dv.data(), dg.data(),
                                  nullptr);
  for (int t : {0, 63, 64, 127, 128, 149}) {
    for (int c = 0; c < 2; ++c) {
      const size_t i = static_cast<size_t>(t) * 2 + c;
      const double saved = g[i];
      g[i] = saved + 1e-6;
      const double up = loss();
      g[i] = saved - 1e-6;
      const double down = loss();
      g[i] = saved;
      EXPECT_NEAR(dg[i], (up - down) / 2e-6, 1e-5) << "t=" << t;
    }
  }
}

TEST(SimpleGlaReference, GateGradientIsTheSumOverKeyChannels) {
  // A per-head gate is a per-channel gate with equal channels: its gradient is their sum.
  RecurrenceShape shape{1, 20, 1, 3, 2, {}};
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(60), k(60), v(40), g(20), d_o(40);
  for (auto* x : {&q, &k, &v, &g, &d_o}) {
    for (float& e : *x) e = normal(rng);
  }
  for (float& e : g) e = -std::log1p(std::exp(-e));
  std::vector<float> dq(60), dk(60), dv(40), dg(20);
  SimpleGlaReferenceBackward(shape, 0.5f, q.data(), k.data(), v.data(), g.data(), nullptr,
                             d_o.data(), nullptr, dq.data(), dk.data(), dv.data(), dg.data(),
                             nullptr);
  std::vector<float> gk(60), dgk(60), dq2(60), dk2(60), dv2(40);
  for (int t = 0; t < 20; ++t) {
    for (int c = 0; c < 3; ++c) gk[t * 3 + c] = g[t];
  }
  GatedRecurrenceBackward<float>(shape, 0.5f, q.data(), k.data(), v.data(), gk.data(), nullptr,
                                 d_o.data(), nullptr, dq2.data(), dk2.data(), dv2.data(),
                                 dgk.data(), nullptr);
  for (int t = 0; t < 20; ++t) {
    EXPECT_NEAR(dg[t], dgk[t * 3] + dgk[t * 3 + 1] + dgk[t * 3 + 2], 1e-4f) << t;
  }
}

}  // namespace
}  // namespace flame::kernels
