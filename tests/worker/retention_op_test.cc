// Retention (worker/ops/retention.h), the chunked simple-GLA path, against the retention
// recurrence written out here step by step, with RetNet's decays γ_h = 1 - 2^(-5-h):
//   S_t = γ_h S_{t-1} + k_t v_tᵀ,   o_t = S_tᵀ (scale · q_t)
// float64, tolerance 1e-10 on outputs and gradients; lengths that are not multiples of the chunk
// (64) and packed sequences.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "worker/ops/retention.h"

namespace flame::worker::ops {
namespace {

// One dense sequence per batch row: q, k [B, T, H, K], v [B, T, H, V] -> [B, T, H, V].
torch::Tensor NaiveRetention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             double scale) {
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), K = q.size(3), V = v.size(3);
  std::vector<double> gamma;
  for (int64_t h = 0; h < H; ++h) gamma.push_back(1.0 - std::pow(2.0, -5.0 - h));
  const torch::Tensor decay = torch::tensor(gamma, torch::kDouble).view({1, H, 1, 1});
  torch::Tensor state = torch::zeros({B, H, K, V}, torch::kDouble);
  std::vector<torch::Tensor> outputs;
  for (int64_t t = 0; t < T; ++t) {
    const torch::Tensor k_t = k.select(1, t), v_t = v.select(1, t);  // [B, H, K], [B, H, V]
    state = decay * state + k_t.unsqueeze(-1) * v_t.unsqueeze(-2);
    outputs.push_back(torch::einsum("bhk,bhkv->bhv", {q.select(1, t) * scale, state}));
  }
  return torch::stack(outputs, 1);
}

double MaxDifference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

TEST(Retention, DecaysAreOneMinusTwoToTheMinusFiveMinusHead) {
  const torch::Tensor log_decay = RetentionLogDecay(4, torch::kDouble, torch::kCPU);
  const std::vector<double> expected = {1 - 1.0 / 32, 1 - 1.0 / 64, 1 - 1.0 / 128, 1 - 1.0 / 256};
  for (int64_t h = 0; h < 4; ++h) {
    EXPECT_NEAR(std::exp(log_decay[h].item<double>()), expected[h], 1e-15) << "head " << h;
  }
  EXPECT_EQ(RetentionLogDecay(4, torch::kBFloat16, torch::kCPU).scalar_type(), torch::kFloat);
}

TEST(Retention, ChunkedPathMatchesTheRecurrence) {
  torch::manual_seed(11);
  // T = 150: two full chunks of 64 and a partial one.
  const torch::Tensor q = torch::randn({2, 150, 3, 16}, torch::kDouble);
  const torch::Tensor k = torch::randn({2, 150, 3, 16}, torch::kDouble);
  const torch::Tensor v = torch::randn({2, 150, 3, 32}, torch::kDouble);
  const torch::Tensor out = ChunkRetention(q, k, v, 0.25).output;
  ASSERT_EQ(out.sizes(), v.sizes());
  EXPECT_LT(MaxDifference(out, NaiveRetention(q, k, v, 0.25)), 1e-10);
}

TEST(Retention, PackedSequencesRestartFromAnEmptyState) {
  torch::manual_seed(12);
  const torch::Tensor q = torch::randn({1, 200, 2, 8}, torch::kDouble);
  const torch::Tensor k = torch::randn({1, 200, 2, 8}, torch::kDouble);
  const torch::Tensor v = torch::randn({1, 200, 2, 8}, torch::kDouble);
  const std::vector<int64_t> bounds = {0, 70, 71, 200};
  const torch::Tensor out =
      ChunkRetention(q, k, v, 0.5, {}, false, torch::tensor(bounds, torch::kLong)).output;
  for (size_t n = 0; n + 1 < bounds.size(); ++n) {
    const int64_t begin = bounds[n], length = bounds[n + 1] - bounds[n];
    const torch::Tensor expected = NaiveRetention(
        q.narrow(1, begin, length), k.narrow(1, begin, length), v.narrow(1, begin, length), 0.5);
    EXPECT_LT(MaxDifference(out.narrow(1, begin, length), expected), 1e-10) << "sequence " << n;
  }
}

TEST(Retention, GradientsMatchTheRecurrence) {
  torch::manual_seed(13);
  const torch::Tensor q = torch::randn({1, 90, 2, 8}, torch::kDouble).requires_grad_(true);
  const torch::Tensor k = torch::randn({1, 90, 2, 8}, torch::kDouble).requires_grad_(true);
  const torch::Tensor v = torch::randn({1, 90, 2, 4}, torch::kDouble).requires_grad_(true);
  const torch::Tensor weights = torch::randn({1, 90, 2, 4}, torch::kDouble);
  const auto grads = [&](const torch::Tensor& out) {
    return torch::autograd::grad({(out * weights).sum()}, {q, k, v});
  };
  const auto got = grads(ChunkRetention(q, k, v, 0.3).output);
  const auto want = grads(NaiveRetention(q, k, v, 0.3));
  for (size_t n = 0; n < got.size(); ++n) {
    EXPECT_LT(MaxDifference(got[n], want[n]), 1e-10) << "gradient " << n;
  }
}

}  // namespace
}  // namespace flame::worker::ops
