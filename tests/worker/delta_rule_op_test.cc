// The chunked delta rule and gated delta rule against their step-by-step recurrences, in float64:
// outputs, final states and gradients (q, k, v, beta, g, initial state), lengths that are not
// multiples of the chunk, strong decays, packed varlen sequences and a finite-difference check.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/ops/delta_rule.h"

namespace flame::worker::ops {
namespace {

struct Inputs {
  torch::Tensor q, k, v, beta, g, h0;  // float64 leaves, requires_grad
};

// What the layers feed the op: q and k L2-normalised, β a sigmoid, g = −softplus(·)/normalizer
// (a small normalizer gives strong decay). The normalisation happens before the leaves are made,
// so the gradients compared are those of the op itself.
Inputs MakeInputs(int64_t B, int64_t T, int64_t H, int64_t K, int64_t V, double normalizer,
                  int64_t num_states, uint64_t seed) {
  torch::manual_seed(seed);
  const auto options = torch::TensorOptions().dtype(torch::kDouble);
  const auto unit = [](const torch::Tensor& x) { return x / x.norm(2, -1, true); };
  Inputs in;
  in.q = unit(torch::randn({B, T, H, K}, options)).requires_grad_();
  in.k = unit(torch::randn({B, T, H, K}, options)).requires_grad_();
  in.v = torch::randn({B, T, H, V}, options).requires_grad_();
  in.beta = torch::sigmoid(torch::randn({B, T, H}, options)).requires_grad_();
  in.g = (-torch::softplus(torch::randn({B, T, H}, options)) / normalizer).requires_grad_();
  in.h0 = torch::randn({num_states, H, K, V}, options).requires_grad_();
  return in;
}

// Relative RMS error ||a − b|| / ||b|| (fla's assert_close metric), naming the worst element.
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

// One op under test: the chunked form and the naive recurrence, gated or not.
struct Rule {
  bool gated;
  DeltaRuleOutput Chunk(const Inputs& in, double scale, const torch::Tensor& h0,
                        const torch::Tensor& cu_seqlens = {}) const {
    return gated ? ChunkGatedDeltaRule(in.q, in.k, in.v, in.g, in.beta, scale, h0, true, cu_seqlens)
                 : ChunkDeltaRule(in.q, in.k, in.v, in.beta, scale, h0, true, cu_seqlens);
  }
  DeltaRuleOutput Naive(const Inputs& in, double scale, const torch::Tensor& h0,
                        const torch::Tensor& cu_seqlens = {}) const {
    return gated ? NaiveGatedDeltaRule(in.q, in.k, in.v, in.g, in.beta, scale, h0, true, cu_seqlens)
                 : NaiveDeltaRule(in.q, in.k, in.v, in.beta, scale, h0, true, cu_seqlens);
  }
};

struct Case {
  bool gated;
  int64_t T;
  double normalizer;
  bool with_state;
};

void PrintTo(const Case& c, std::ostream* out) {
  *out << (c.gated ? "gated" : "plain") << " T=" << c.T << " normalizer=" << c.normalizer
       << (c.with_state ? " with state" : "");
}

class ChunkDeltaRuleMatchesNaive : public ::testing::TestWithParam<Case> {};

TEST_P(ChunkDeltaRuleMatchesNaive, InOutputsFinalStatesAndGradients) {
  const Case c = GetParam();
  const Rule rule{c.gated};
  const int64_t B = 2, H = 2, K = 8, V = 6;
  const Inputs in = MakeInputs(B, c.T, H, K, V, c.normalizer, B, /*seed=*/c.T);
  const torch::Tensor h0 = c.with_state ? in.h0 : torch::Tensor();
  const double scale = 1.0 / std::sqrt(static_cast<double>(K));

  const DeltaRuleOutput chunk = rule.Chunk(in, scale, h0);
  const DeltaRuleOutput naive = rule.Naive(in, scale, h0);
  ExpectClose(chunk.output, naive.output, 1e-10, "output");
  ExpectClose(chunk.final_state, naive.final_state, 1e-10, "final state");

  // Gradients of a loss that touches both outputs, with random weights.
  const torch::Tensor w_o = torch::randn_like(naive.output);
  const torch::Tensor w_s = torch::randn_like(naive.final_state);
  std::vector<torch::Tensor> inputs = {in.q, in.k, in.v, in.beta};
  std::vector<std::string> names = {"dq", "dk", "dv", "dbeta"};
  if (c.gated) {
    inputs.push_back(in.g);
    names.push_back("dg");
  }
  if (c.with_state) {
    inputs.push_back(in.h0);
    names.push_back("dh0");
  }
  const auto grads_of = [&](const DeltaRuleOutput& out) {
    const torch::Tensor loss = (out.output * w_o).sum() + (out.final_state * w_s).sum();
    return torch::autograd::grad({loss}, inputs);
  };
  const std::vector<torch::Tensor> chunk_grads = grads_of(chunk), naive_grads = grads_of(naive);
  for (size_t i = 0; i < inputs.size(); ++i) {
    ExpectClose(chunk_grads[i], naive_grads[i], 1e-9, names[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(
    LengthsAndDecays, ChunkDeltaRuleMatchesNaive,
    ::testing::Values(Case{false, 1, 1.0, false},    // a single token
                      Case{false, 77, 1.0, true},    // one full chunk and a partial one
                      Case{false, 130, 1.0, false},  // three chunks, the last of two rows
                      Case{false, 64, 1.0, true},    // exactly one chunk
                      Case{true, 17, 1.0, true},     // shorter than a chunk
                      Case{true, 77, 4.0, false},    // weak decay
                      Case{true, 130, 1.0, true},    // three chunks
                      Case{true, 100, 0.05, true}),  // strong decay: about −14 per step
    [](const ::testing::TestParamInfo<Case>& info) {
      const Case& c = info.param;
      return absl::StrCat(c.gated ? "Gated" : "Plain", "_T", c.T, "_Normalizer",
                          static_cast<int64_t>(c.normalizer * 100),
                          c.with_state ? "_WithState" : "");
    });

TEST(ChunkGatedDeltaRule, StaysFiniteUnderDecaysThatUnderflow) {
  // Cumulative gates of about −5000 inside one chunk: a naive exp(γ_i − γ_j) for j > i is inf.
  const Inputs in = MakeInputs(1, 100, 2, 4, 4, 0.001, 1, 7);
  const DeltaRuleOutput out =
      ChunkGatedDeltaRule(in.q, in.k, in.v, in.g, in.beta, 0.5, in.h0, true);
  EXPECT_TRUE(torch::isfinite(out.output).all().item<bool>());
  EXPECT_TRUE(torch::isfinite(out.final_state).all().item<bool>());
  const torch::Tensor loss = out.output.sum() + out.final_state.sum();
  const std::vector<torch::Tensor> grads =
      torch::autograd::grad({loss}, {in.q, in.k, in.v, in.beta, in.g, in.h0});
  for (const torch::Tensor& grad : grads) EXPECT_TRUE(torch::isfinite(grad).all().item<bool>());
  // And it still agrees with the recurrence.
  const DeltaRuleOutput naive =
      NaiveGatedDeltaRule(in.q, in.k, in.v, in.g, in.beta, 0.5, in.h0, true);
  ExpectClose(out.output, naive.output, 1e-10, "output under strong decay");
}

TEST(ChunkDeltaRule, TreatsPackedSequencesAsIndependent) {
  // Three sequences of odd lengths packed into one row give what three separate calls give.
  const std::vector<int64_t> lengths = {67, 5, 91};
  const torch::Tensor cu_seqlens = torch::tensor({0, 67, 72, 163}, torch::kLong);
  for (const bool gated : {false, true}) {
    const Rule rule{gated};
    const Inputs in = MakeInputs(1, 163, 2, 4, 3, 1.0, 3, 11);
    const DeltaRuleOutput packed = rule.Chunk(in, 0.5, in.h0, cu_seqlens);
    ASSERT_EQ(packed.final_state.sizes(), (std::vector<int64_t>{3, 2, 4, 3}));
    int64_t begin = 0;
    for (size_t n = 0; n < lengths.size(); ++n) {
      const auto slice = [&](const torch::Tensor& x) { return x.narrow(1, begin, lengths[n]); };
      const Inputs alone{slice(in.q), slice(in.k), slice(in.v), slice(in.beta), slice(in.g), {}};
      const torch::Tensor h0 = in.h0.narrow(0, static_cast<int64_t>(n), 1);
      const DeltaRuleOutput expected = rule.Naive(alone, 0.5, h0);
      const std::string what = absl::StrCat(gated ? "gated" : "plain", " sequence ", n);
      ExpectClose(slice(packed.output), expected.output, 1e-10, what);
      ExpectClose(packed.final_state.narrow(0, static_cast<int64_t>(n), 1), expected.final_state,
                  1e-10, what + " state");
      begin += lengths[n];
    }
  }
}

TEST(ChunkGatedDeltaRule, PassesAFiniteDifferenceGradientCheck) {
  const Inputs in = MakeInputs(1, 70, 1, 3, 2, 1.0, 1, 3);
  const auto function = [](const std::vector<torch::Tensor>& x) {
    const DeltaRuleOutput out = ChunkGatedDeltaRule(x[0], x[1], x[2], x[3], x[4], 0.7, x[5], true);
    return out.output.pow(2).sum() + out.final_state.sum();
  };
  const std::vector<torch::Tensor> inputs = {in.q, in.k, in.v, in.g, in.beta, in.h0};
  const std::vector<torch::Tensor> analytic = torch::autograd::grad({function(inputs)}, inputs);
  // Central differences on a sample of coordinates of every input.
  const double eps = 1e-6;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const torch::Tensor flat = inputs[i].detach().flatten();
    for (int64_t j = 0; j < flat.numel(); j += std::max<int64_t>(1, flat.numel() / 7)) {
      std::vector<torch::Tensor> plus, minus;
      for (const torch::Tensor& x : inputs) {
        plus.push_back(x.detach().clone());
        minus.push_back(x.detach().clone());
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

TEST(ChunkDeltaRule, ComputesInFloat32ForFloat32InputsAndKeepsTheStateFloat32) {
  const Inputs in = MakeInputs(1, 80, 2, 4, 4, 1.0, 1, 5);
  const auto f32 = [](const torch::Tensor& x) { return x.detach().to(torch::kFloat); };
  const DeltaRuleOutput out = ChunkGatedDeltaRule(f32(in.q), f32(in.k), f32(in.v), f32(in.g),
                                                  f32(in.beta), 0.5, f32(in.h0), true);
  const DeltaRuleOutput reference =
      NaiveGatedDeltaRule(in.q, in.k, in.v, in.g, in.beta, 0.5, in.h0, true);
  EXPECT_EQ(out.output.scalar_type(), torch::kFloat);
  EXPECT_EQ(out.final_state.scalar_type(), torch::kFloat);
  ExpectClose(out.output.to(torch::kDouble), reference.output, 1e-5, "float32 output");
  // bf16 inputs: a bf16 output, a float32 state.
  const auto bf16 = [](const torch::Tensor& x) { return x.detach().to(torch::kBFloat16); };
  const DeltaRuleOutput low =
      ChunkDeltaRule(bf16(in.q), bf16(in.k), bf16(in.v), bf16(in.beta), 0.5, {}, true);
  EXPECT_EQ(low.output.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(low.final_state.scalar_type(), torch::kFloat);
}

TEST(ChunkDeltaRule, RejectsBadArgumentsNamingThem) {
  const torch::Tensor q = torch::zeros({1, 8, 2, 4});
  const torch::Tensor v = torch::zeros({1, 8, 2, 3});
  const torch::Tensor beta = torch::zeros({1, 8, 2});
  const auto message = [](const std::function<void()>& call) {
    try {
      call();
    } catch (const c10::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] {
              ChunkDeltaRule(q, q, v, torch::zeros({1, 8}), 1.0);
            }).find("beta"),
            std::string::npos);
  EXPECT_NE(message([&] {
              ChunkGatedDeltaRule(q, q, v, torch::zeros({1, 8, 3}), beta, 1.0);
            }).find("g must be"),
            std::string::npos);
  EXPECT_NE(message([&] {
              ChunkDeltaRule(q, torch::zeros({1, 8, 2, 5}), v, beta, 1.0);
            }).find("k must match"),
            std::string::npos);
  EXPECT_NE(message([&] {
              ChunkDeltaRule(q, q, v, beta, 1.0, {}, false, torch::tensor({0, 5, 5, 8}));
            }).find("strictly increasing"),
            std::string::npos);
  EXPECT_NE(message([&] {
              ChunkDeltaRule(q, q, v, beta, 1.0, torch::zeros({2, 2, 4, 3}), false,
                             torch::tensor({0, 8}));
            }).find("initial_state"),
            std::string::npos);
}

}  // namespace
}  // namespace flame::worker::ops
