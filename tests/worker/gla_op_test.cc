// The chunked GLA reference against the step-by-step recurrence, in float64: outputs, final
// states and gradients (q, k, v, g, initial state), over lengths that are not multiples of the
// chunk, strong and weak decays, and packed varlen sequences.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "worker/ops/gla.h"

namespace flame::worker::ops {
namespace {

struct Inputs {
  torch::Tensor q, k, v, g, h0;  // float64, requires_grad
};

// g = logsigmoid(x) / normalizer, fla's way of drawing gates: a small normalizer gives strong
// decay (log gates far below 0), a large one weak decay.
Inputs MakeInputs(int64_t B, int64_t T, int64_t H, int64_t K, int64_t V, double normalizer,
                  int64_t num_states, uint64_t seed) {
  torch::manual_seed(seed);
  const auto options = torch::TensorOptions().dtype(torch::kDouble);
  Inputs in;
  in.q = torch::randn({B, T, H, K}, options).requires_grad_();
  in.k = torch::randn({B, T, H, K}, options).requires_grad_();
  in.v = torch::randn({B, T, H, V}, options).requires_grad_();
  in.g = (torch::log_sigmoid(torch::randn({B, T, H, K}, options)) / normalizer).requires_grad_();
  in.h0 = torch::randn({num_states, H, K, V}, options).requires_grad_();
  return in;
}

// Relative RMS error ||a - b|| / ||b|| (fla's assert_close metric), with the worst element named
// in the failure message.
void ExpectClose(const torch::Tensor& actual, const torch::Tensor& expected, double tolerance,
                 const std::string& what) {
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  const torch::Tensor diff = (actual - expected).abs();
  const double error = diff.norm().item<double>() / (expected.norm().item<double>() + 1e-30);
  const int64_t worst = diff.flatten().argmax().item<int64_t>();
  EXPECT_LT(error, tolerance) << what << ": relative error " << error << ", worst element " << worst
                              << " is " << actual.flatten()[worst].item<double>() << " vs "
                              << expected.flatten()[worst].item<double>();
}

struct Case {
  int64_t T;
  double normalizer;
  bool with_state;
};

void PrintTo(const Case& c, std::ostream* out) {
  *out << "T=" << c.T << " normalizer=" << c.normalizer << (c.with_state ? " with state" : "");
}

class ChunkGlaMatchesNaive : public ::testing::TestWithParam<Case> {};

TEST_P(ChunkGlaMatchesNaive, InOutputsFinalStatesAndGradients) {
  const Case c = GetParam();
  const int64_t B = 2, H = 2, K = 8, V = 6;
  const Inputs in = MakeInputs(B, c.T, H, K, V, c.normalizer, B, /*seed=*/c.T);
  const torch::Tensor h0 = c.with_state ? in.h0 : torch::Tensor();
  const double scale = 1.0 / std::sqrt(static_cast<double>(K));

  const GlaOutput chunk = ChunkGla(in.q, in.k, in.v, in.g, scale, h0, true);
  const GlaOutput naive = NaiveGla(in.q, in.k, in.v, in.g, scale, h0, true);
  ExpectClose(chunk.output, naive.output, 1e-10, "output");
  ExpectClose(chunk.final_state, naive.final_state, 1e-10, "final state");

  // Gradients of a loss that touches both outputs, with random weights.
  const torch::Tensor w_o = torch::randn_like(naive.output);
  const torch::Tensor w_s = torch::randn_like(naive.final_state);
  std::vector<torch::Tensor> inputs = {in.q, in.k, in.v, in.g};
  if (c.with_state) inputs.push_back(in.h0);
  const auto grads_of = [&](const GlaOutput& out) {
    const torch::Tensor loss = (out.output * w_o).sum() + (out.final_state * w_s).sum();
    return torch::autograd::grad({loss}, inputs);
  };
  const std::vector<torch::Tensor> chunk_grads = grads_of(chunk), naive_grads = grads_of(naive);
  const char* const names[] = {"dq", "dk", "dv", "dg", "dh0"};
  for (size_t i = 0; i < inputs.size(); ++i) {
    ExpectClose(chunk_grads[i], naive_grads[i], 1e-9, names[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(
    LengthsAndDecays, ChunkGlaMatchesNaive,
    ::testing::Values(Case{1, 1.0, false},      // a single token
                      Case{17, 1.0, true},      // shorter than a sub-chunk row block
                      Case{64, 16.0, false},    // exactly one chunk, weak decay
                      Case{100, 0.05, true},    // strong decay: gates around -14 per step
                      Case{150, 16.0, true},    // three chunks, the last one partial
                      Case{129, 0.01, false}),  // extreme decay: exp(-70) per step
    [](const ::testing::TestParamInfo<Case>& info) {
      const Case& c = info.param;
      return absl::StrCat("T", c.T, "_Normalizer",
                          absl::StrReplaceAll(absl::StrCat(c.normalizer), {{".", "p"}}),
                          c.with_state ? "_WithState" : "");
    });

TEST(ChunkGla, KeepsGradientsFiniteUnderDecaysThatUnderflow) {
  // Cumulative gates of -5000 inside one chunk: a naive exp(γ_i - γ_j) for j > i would be inf.
  const Inputs in = MakeInputs(1, 64, 1, 4, 4, 0.001, 1, 7);
  const GlaOutput out = ChunkGla(in.q, in.k, in.v, in.g, 0.5, in.h0, true);
  const torch::Tensor loss = out.output.sum() + out.final_state.sum();
  const std::vector<torch::Tensor> grads = torch::autograd::grad({loss}, {in.q, in.k, in.v, in.g});
  for (const torch::Tensor& grad : grads) EXPECT_TRUE(torch::isfinite(grad).all().item<bool>());
}

TEST(ChunkGla, TreatsPackedSequencesAsIndependent) {
  // Three sequences packed into one row must give what three separate calls give.
  const std::vector<int64_t> lengths = {70, 5, 90};
  const Inputs in = MakeInputs(1, 165, 2, 4, 3, 2.0, 3, 11);
  const torch::Tensor cu_seqlens = torch::tensor({0, 70, 75, 165}, torch::kLong);
  const GlaOutput packed = ChunkGla(in.q, in.k, in.v, in.g, 0.5, in.h0, true, cu_seqlens);
  const GlaOutput naive = NaiveGla(in.q, in.k, in.v, in.g, 0.5, in.h0, true, cu_seqlens);
  ExpectClose(packed.output, naive.output, 1e-10, "varlen output");
  ExpectClose(packed.final_state, naive.final_state, 1e-10, "varlen final state");
  int64_t begin = 0;
  for (size_t n = 0; n < lengths.size(); ++n) {
    const auto slice = [&](const torch::Tensor& x) { return x.narrow(1, begin, lengths[n]); };
    const GlaOutput alone = NaiveGla(slice(in.q), slice(in.k), slice(in.v), slice(in.g), 0.5,
                                     in.h0.narrow(0, static_cast<int64_t>(n), 1), true);
    ExpectClose(slice(packed.output), alone.output, 1e-10, "sequence " + std::to_string(n));
    begin += lengths[n];
  }
}

TEST(ChunkGla, PassesAFiniteDifferenceGradientCheck) {
  const Inputs in = MakeInputs(1, 70, 1, 3, 2, 1.0, 1, 3);
  const auto function = [](const std::vector<torch::Tensor>& x) {
    const GlaOutput out = ChunkGla(x[0], x[1], x[2], x[3], 0.7, x[4], true);
    return out.output.pow(2).sum() + out.final_state.sum();
  };
  const std::vector<torch::Tensor> inputs = {in.q, in.k, in.v, in.g, in.h0};
  const std::vector<torch::Tensor> analytic = torch::autograd::grad({function(inputs)}, inputs);
  // Central differences on a sample of coordinates of every input.
  const double eps = 1e-6;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const torch::Tensor flat = inputs[i].detach().flatten();
    for (int64_t j = 0; j < flat.numel(); j += std::max<int64_t>(1, flat.numel() / 7)) {
      std::vector<torch::Tensor> plus, minus;
      for (size_t m = 0; m < inputs.size(); ++m) {
        plus.push_back(inputs[m].detach().clone());
        minus.push_back(inputs[m].detach().clone());
      }
      plus[i].view({-1})[j] += eps;
      minus[i].view({-1})[j] -= eps;
      const double numeric =
          (function(plus).item<double>() - function(minus).item<double>()) / (2 * eps);
      const double exact = analytic[i].flatten()[j].item<double>();
      EXPECT_NEAR(exact, numeric, 1e-5 * std::max(1.0, std::abs(numeric)))
          << "input " << i << " element " << j;
    }
  }
}

TEST(ChunkGla, ComputesInFloat32ForFloat32Inputs) {
  const Inputs in = MakeInputs(1, 80, 2, 4, 4, 4.0, 1, 5);
  const auto f32 = [](const torch::Tensor& x) { return x.detach().to(torch::kFloat); };
  const GlaOutput out = ChunkGla(f32(in.q), f32(in.k), f32(in.v), f32(in.g), 0.5, f32(in.h0), true);
  const GlaOutput reference = NaiveGla(in.q, in.k, in.v, in.g, 0.5, in.h0, true);
  EXPECT_EQ(out.output.scalar_type(), torch::kFloat);
  EXPECT_EQ(out.final_state.scalar_type(), torch::kFloat);
  ExpectClose(out.output.to(torch::kDouble), reference.output, 1e-5, "float32 output");
}

TEST(ChunkGla, RejectsMismatchedShapesWithTheirSizes) {
  const torch::Tensor q = torch::zeros({1, 8, 2, 4});
  const torch::Tensor v = torch::zeros({1, 8, 2, 3});
  try {
    ChunkGla(q, torch::zeros({1, 8, 2, 5}), v, q, 1.0);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("must match q"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ChunkGla(q, q, v, q, 1.0, {}, false, torch::tensor({0, 5, 5, 8})), c10::Error);
}

}  // namespace
}  // namespace flame::worker::ops
