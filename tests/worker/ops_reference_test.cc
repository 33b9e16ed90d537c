// The ATen references of the op entry points (what CPU tensors run, and what the CUDA paths are
// tested against in ops_cuda_test.cc), checked against independent formulations in float64.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "worker/ops/gla.h"
#include "worker/ops/layer_ops.h"
#include "worker/ops/simple_gla.h"

namespace flame::worker::ops {
namespace {

const auto kDouble = torch::TensorOptions().dtype(torch::kDouble);

void ExpectNear(const torch::Tensor& actual, const torch::Tensor& expected, double tolerance,
                const std::string& what) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  const double error = (actual - expected).abs().max().item<double>();
  EXPECT_LT(error, tolerance) << what << ": max abs error " << error;
}

TEST(ChunkSimpleGlaReference, EqualsTheRecurrenceWithTheGateBroadcastOverK) {
  torch::manual_seed(1);
  const int64_t B = 1, T = 90, H = 2, K = 8, V = 4;
  const torch::Tensor q = torch::randn({B, T, H, K}, kDouble);
  const torch::Tensor k = torch::randn({B, T, H, K}, kDouble);
  const torch::Tensor v = torch::randn({B, T, H, V}, kDouble);
  const torch::Tensor g =
      (torch::log_sigmoid(torch::randn({B, T, H}, kDouble)) / 4).requires_grad_();
  const torch::Tensor cu = torch::tensor(std::vector<int64_t>{0, 21, 90});
  const torch::Tensor h0 = torch::randn({2, H, K, V}, kDouble);
  const GlaOutput chunk = ChunkSimpleGla(q, k, v, g, {}, 0.5, h0, true, cu);
  const torch::Tensor g_leaf = g.detach().requires_grad_();
  const GlaOutput naive =
      NaiveGla(q, k, v, g_leaf.unsqueeze(-1).expand({B, T, H, K}), 0.5, h0, true, cu);
  ExpectNear(chunk.output, naive.output, 1e-10, "o");
  ExpectNear(chunk.final_state, naive.final_state, 1e-10, "final_state");
  const torch::Tensor w = torch::randn({B, T, H, V}, kDouble);
  (chunk.output * w).sum().backward();
  (naive.output * w).sum().backward();
  ExpectNear(g.grad(), g_leaf.grad(), 1e-9, "dg");
}

TEST(ChunkSimpleGlaReference, ConstantDecayEqualsAConstantGate) {
  torch::manual_seed(2);
  const int64_t B = 2, T = 70, H = 3, K = 8, V = 8;
  const torch::Tensor q = torch::randn({B, T, H, K}, kDouble);
  const torch::Tensor k = torch::randn({B, T, H, K}, kDouble);
  const torch::Tensor v = torch::randn({B, T, H, V}, kDouble);
  const torch::Tensor gamma = torch::tensor({-0.03, -0.01, -0.3}, kDouble);
  const torch::Tensor g = gamma.view({1, 1, H}).expand({B, T, H});
  ExpectNear(ChunkSimpleGla(q, k, v, {}, gamma, 0.3).output,
             ChunkSimpleGla(q, k, v, g, {}, 0.3).output, 1e-12, "o");
}

TEST(ChunkSimpleGlaReference, RejectsBothOrNeitherGate) {
  const torch::Tensor q = torch::randn({1, 4, 2, 8}, kDouble);
  const torch::Tensor g = torch::zeros({1, 4, 2}, kDouble);
  EXPECT_THROW(ChunkSimpleGla(q, q, q, {}, {}, 1.0), c10::Error);
  EXPECT_THROW(ChunkSimpleGla(q, q, q, g, torch::zeros({2}, kDouble), 1.0), c10::Error);
}

TEST(RmsNormReference, AddsTheResidualNormalisesAndGates) {
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({5, 16}, kDouble), r = torch::randn({5, 16}, kDouble);
  const torch::Tensor w = torch::rand({16}, kDouble), gate = torch::randn({5, 16}, kDouble);
  const RmsNormOutput out = RmsNorm(x, r, w, gate, 1e-6);
  const torch::Tensor h = x + r;
  const torch::Tensor rms = (h.pow(2).mean(-1, true) + 1e-6).sqrt();
  ExpectNear(out.residual_out, h, 1e-12, "residual_out");
  ExpectNear(out.y, h / rms * w * gate * torch::sigmoid(gate), 1e-12, "y");
  EXPECT_FALSE(RmsNorm(x, {}, {}, {}, 1e-6).residual_out.defined());
}

TEST(CrossEntropyReference, MatchesTorchAndIgnoresLabels) {
  torch::manual_seed(4);
  const torch::Tensor logits = torch::randn({6, 10}, kDouble);
  const torch::Tensor labels = torch::tensor(std::vector<int64_t>{1, -100, 3, 9, -100, 0});
  const torch::Tensor expected = torch::nn::functional::cross_entropy(
      logits, labels, torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100));
  ExpectNear(CrossEntropy(logits, labels), expected, 1e-12, "loss");
  const torch::Tensor hidden = torch::randn({6, 4}, kDouble),
                      weight = torch::randn({10, 4}, kDouble);
  ExpectNear(LinearCrossEntropy(hidden, weight, labels),
             CrossEntropy(torch::matmul(hidden, weight.t()), labels), 1e-12, "linear loss");
}

TEST(CrossEntropyReference, IsZeroWhenEveryLabelIsIgnored) {
  const torch::Tensor logits = torch::randn({3, 5}, kDouble).requires_grad_();
  const torch::Tensor loss = CrossEntropy(logits, torch::full({3}, int64_t{-100}));
  EXPECT_EQ(loss.item<double>(), 0.0);
  loss.backward();
  EXPECT_EQ(logits.grad().abs().sum().item<double>(), 0.0);
}

TEST(ShortConvReference, IsACausalSumThatRestartsAtEachSequence) {
  torch::manual_seed(5);
  const int64_t T = 9, D = 3, W = 4;
  const torch::Tensor x = torch::randn({1, T, D}, kDouble);
  const torch::Tensor weight = torch::randn({D, W}, kDouble), bias = torch::randn({D}, kDouble);
  const std::vector<int64_t> bounds = {0, 2, 9};
  const torch::Tensor y = ShortConv(x, weight, bias, false, torch::tensor(bounds));
  torch::Tensor expected = torch::zeros({1, T, D}, kDouble);
  for (size_t n = 0; n + 1 < bounds.size(); ++n) {
    for (int64_t t = bounds[n]; t < bounds[n + 1]; ++t) {
      torch::Tensor z = bias.clone();
      for (int64_t j = 0; j < W; ++j) {
        const int64_t s = t - (W - 1) + j;
        if (s >= bounds[n]) z += weight.select(1, j) * x[0][s];
      }
      expected[0][t] = z;
    }
  }
  ExpectNear(y, expected, 1e-12, "y");
  const torch::Tensor silu = ShortConv(x, weight, bias, true, torch::tensor(bounds));
  ExpectNear(silu, expected * torch::sigmoid(expected), 1e-12, "silu(y)");
}

TEST(L2NormReference, GivesUnitRows) {
  const torch::Tensor y = L2Norm(torch::randn({4, 7, 32}, kDouble), 0.0);
  ExpectNear(y.norm(2, -1), torch::ones({4, 7}, kDouble), 1e-12, "row norms");
}

TEST(RotaryReference, RotatesPairsByPositionAndRestartsPerSequence) {
  torch::manual_seed(6);
  const int64_t T = 6, H = 2, D = 8;
  const torch::Tensor x = torch::randn({1, T, H, D}, kDouble);
  RotaryOptions options;
  options.rotary_dim = 4;
  options.base = 100.0;
  const torch::Tensor y = Rotary(x, options, torch::tensor(std::vector<int64_t>{0, 2, 6}));
  // Token 2 starts the second sequence: position 0, unrotated; features past rotary_dim pass.
  ExpectNear(y.select(1, 2), x.select(1, 2), 1e-12, "first token of sequence 2");
  ExpectNear(y.narrow(3, 4, 4), x.narrow(3, 4, 4), 1e-12, "unrotated features");
  // Token 4 is at position 2: pair (0, 2) turns by 2 rad, pair (1, 3) by 2 / 100^(2/4) rad.
  const double t0 = 2.0, t1 = 2.0 / 10.0;
  const torch::Tensor xt = x[0][4], yt = y[0][4];
  for (int64_t h = 0; h < H; ++h) {
    const double x0 = xt[h][0].item<double>(), x2 = xt[h][2].item<double>();
    const double x1 = xt[h][1].item<double>(), x3 = xt[h][3].item<double>();
    EXPECT_NEAR(yt[h][0].item<double>(), x0 * std::cos(t0) - x2 * std::sin(t0), 1e-12);
    EXPECT_NEAR(yt[h][2].item<double>(), x2 * std::cos(t0) + x0 * std::sin(t0), 1e-12);
    EXPECT_NEAR(yt[h][1].item<double>(), x1 * std::cos(t1) - x3 * std::sin(t1), 1e-12);
    EXPECT_NEAR(yt[h][3].item<double>(), x3 * std::cos(t1) + x1 * std::sin(t1), 1e-12);
  }
}

TEST(SwiGluReference, IsSwishOfGateTimesUp) {
  const torch::Tensor gate = torch::randn({3, 8}, kDouble), up = torch::randn({3, 8}, kDouble);
  ExpectNear(SwiGlu(gate, up), gate * torch::sigmoid(gate) * up, 1e-12, "y");
}

}  // namespace
}  // namespace flame::worker::ops
