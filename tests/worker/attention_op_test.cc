// Causal softmax attention (worker/ops/attention.h) against the textbook formula written here:
// one [T, T] score matrix per head with -inf outside the allowed keys, softmax, weighted sum.
// float64, tolerance 1e-12; grouped-query heads, sliding windows and packed sequences.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <vector>

#include "worker/ops/attention.h"

namespace flame::worker::ops {
namespace {

// q [B, T, H, D], k, v [B, T, H_kv, *]; `segment` [T] gives each position's packed sequence.
torch::Tensor NaiveAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             double scale, int64_t window, const torch::Tensor& segment) {
  const int64_t T = q.size(1), groups = q.size(2) / k.size(2);
  const torch::Tensor kk = k.repeat_interleave(groups, 2), vv = v.repeat_interleave(groups, 2);
  torch::Tensor scores = torch::einsum("bihd,bjhd->bhij", {q, kk}) * scale;  // [B, H, T, T]
  const torch::Tensor i = torch::arange(T).unsqueeze(1), j = torch::arange(T).unsqueeze(0);
  torch::Tensor allowed = j <= i;
  if (window > 0) allowed = allowed.logical_and(i - j < window);
  allowed = allowed.logical_and(segment.unsqueeze(1) == segment.unsqueeze(0));
  scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  return torch::einsum("bhij,bjhd->bihd", {torch::softmax(scores, -1), vv});  // [B, T, H, Dv]
}

double MaxDifference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

struct Inputs {
  torch::Tensor q, k, v;
};

Inputs RandomInputs(int64_t B, int64_t T, int64_t H, int64_t H_kv, int64_t D, int64_t Dv) {
  torch::manual_seed(7);
  const auto f64 = torch::TensorOptions().dtype(torch::kDouble);
  return {torch::randn({B, T, H, D}, f64), torch::randn({B, T, H_kv, D}, f64),
          torch::randn({B, T, H_kv, Dv}, f64)};
}

TEST(CausalAttention, MatchesTheSoftmaxFormulaWithGroupedHeads) {
  const Inputs in = RandomInputs(2, 37, 4, 2, 8, 6);
  const torch::Tensor out = CausalAttention(in.q, in.k, in.v, 0.3);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{2, 37, 4, 6}));
  const torch::Tensor expected = NaiveAttention(in.q, in.k, in.v, 0.3, 0, torch::zeros({37}));
  EXPECT_LT(MaxDifference(out, expected), 1e-12);
}

TEST(CausalAttention, SlidingWindowSeesItselfAndTheWindowMinusOnePreviousKeys) {
  const Inputs in = RandomInputs(1, 30, 2, 1, 4, 4);
  const torch::Tensor out = CausalAttention(in.q, in.k, in.v, 0.5, /*window_size=*/5);
  const torch::Tensor expected = NaiveAttention(in.q, in.k, in.v, 0.5, 5, torch::zeros({30}));
  EXPECT_LT(MaxDifference(out, expected), 1e-12);
  // Position 0 sees only itself: its output is v_0 of its head.
  EXPECT_LT(MaxDifference(out.select(1, 0), in.v.select(1, 0).expand({1, 2, 4})), 1e-12);
  // A window as long as the sequence is no window.
  EXPECT_LT(MaxDifference(CausalAttention(in.q, in.k, in.v, 0.5, 30),
                          CausalAttention(in.q, in.k, in.v, 0.5)),
            1e-12);
}

TEST(CausalAttention, PackedSequencesNeverSeeEachOther) {
  const Inputs in = RandomInputs(1, 40, 4, 4, 8, 8);
  const torch::Tensor cu_seqlens = torch::tensor({0, 7, 8, 25, 40}, torch::kLong);
  const torch::Tensor segment = torch::repeat_interleave(
      torch::arange(4), torch::tensor({7, 1, 17, 15}, torch::kLong));  // [T]
  for (const int64_t window : {0, 6}) {
    const torch::Tensor out = CausalAttention(in.q, in.k, in.v, 0.35, window, cu_seqlens);
    const torch::Tensor expected = NaiveAttention(in.q, in.k, in.v, 0.35, window, segment);
    EXPECT_LT(MaxDifference(out, expected), 1e-12) << "window " << window;
  }
}

TEST(CausalAttention, GradientsMatchTheFormula) {
  Inputs in = RandomInputs(1, 20, 4, 2, 4, 4);
  for (torch::Tensor* t : {&in.q, &in.k, &in.v}) t->requires_grad_(true);
  const torch::Tensor weights = torch::randn({1, 20, 4, 4}, torch::kDouble);
  const torch::Tensor cu_seqlens = torch::tensor({0, 9, 20}, torch::kLong);
  const torch::Tensor segment = (torch::arange(20) >= 9).to(torch::kLong);
  const auto grads = [&](const torch::Tensor& out) {
    return torch::autograd::grad({(out * weights).sum()}, {in.q, in.k, in.v});
  };
  const auto got = grads(CausalAttention(in.q, in.k, in.v, 0.5, 3, cu_seqlens));
  const auto want = grads(NaiveAttention(in.q, in.k, in.v, 0.5, 3, segment));
  for (size_t n = 0; n < got.size(); ++n) {
    EXPECT_LT(MaxDifference(got[n], want[n]), 1e-12) << "gradient " << n;
  }
}

TEST(CausalAttention, RefusesBadShapesByName) {
  const Inputs in = RandomInputs(2, 10, 3, 2, 4, 4);
  try {
    CausalAttention(in.q, in.k, in.v, 1.0);
    FAIL() << "H_kv = 2 does not divide H = 3";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("must divide H"), std::string::npos);
  }
  const Inputs ok = RandomInputs(2, 10, 2, 2, 4, 4);
  EXPECT_THROW(CausalAttention(ok.q, ok.k, ok.v, 1.0, 0, torch::tensor({0, 10}, torch::kLong)),
               c10::Error);  // cu_seqlens needs B == 1
}

}  // namespace
}  // namespace flame::worker::ops
