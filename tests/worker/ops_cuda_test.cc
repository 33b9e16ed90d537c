// The ops' CUDA paths against their CPU references (issue 3's bar; the harness is
// ops_cuda_testing.h): outputs and the gradients of every input must agree to a relative RMS error
// of 5e-3, 2e-2 for gate gradients. Skips where no GPU is visible; compiled in FLAME_CUDA builds
// only (tests/worker/CMakeLists.txt, tests/worker/ops_cuda/ on a GPU host). The delta rules are in
// delta_rule_cuda_test.cc.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "tests/worker/ops_cuda_testing.h"
#include "worker/ops/gla.h"
#include "worker/ops/layer_ops.h"
#include "worker/ops/simple_gla.h"

namespace flame::worker::ops {
namespace {

// ---- chunk_gla / chunk_simple_gla ---------------------------------------------------------

class ChunkGlaCuda : public ::testing::TestWithParam<GatedCase> {};

TEST_P(ChunkGlaCuda, OutputsAndGradientsMatchTheReference) {
  FLAME_SKIP_WITHOUT_GPU();
  const GatedCase c = GetParam();
  torch::manual_seed(7);
  const int64_t N = c.cu_seqlens.empty() ? c.B : static_cast<int64_t>(c.cu_seqlens.size()) - 1;
  std::vector<Input> inputs = {
      Bf16Input("q", torch::randn({c.B, c.T, c.H, c.K})),
      Bf16Input("k", torch::randn({c.B, c.T, c.H, c.K})),
      Bf16Input("v", torch::randn({c.B, c.T, c.H, c.V})),
      {"g", Gate({c.B, c.T, c.H, c.K}, c.normalizer), torch::kFloat, 2e-2},
      {"h0", torch::randn({N, c.H, c.K, c.V}), torch::kFloat, c.states ? 5e-3 : 0.0}};
  const torch::Tensor cu = c.cu_seqlens.empty() ? torch::Tensor() : torch::tensor(c.cu_seqlens);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.K));
  const bool states = c.states;
  ExpectGpuMatchesReference(inputs,
                            [&](const std::vector<torch::Tensor>& x) {
                              const GlaOutput out =
                                  ChunkGla(x[0], x[1], x[2], x[3], scale,
                                           states ? x[4] : torch::Tensor(), true, cu);
                              return std::vector<torch::Tensor>{out.output, out.final_state};
                            },
                            {"o", "final_state"});
}

INSTANTIATE_TEST_SUITE_P(Shapes, ChunkGlaCuda, ::testing::ValuesIn(kGatedCases));

class ChunkSimpleGlaCuda : public ::testing::TestWithParam<GatedCase> {};

TEST_P(ChunkSimpleGlaCuda, OutputsAndGradientsMatchTheReference) {
  FLAME_SKIP_WITHOUT_GPU();
  const GatedCase c = GetParam();
  torch::manual_seed(8);
  const int64_t N = c.cu_seqlens.empty() ? c.B : static_cast<int64_t>(c.cu_seqlens.size()) - 1;
  std::vector<Input> inputs = {
      Bf16Input("q", torch::randn({c.B, c.T, c.H, c.K})),
      Bf16Input("k", torch::randn({c.B, c.T, c.H, c.K})),
      Bf16Input("v", torch::randn({c.B, c.T, c.H, c.V})),
      {"g", Gate({c.B, c.T, c.H}, c.normalizer), torch::kFloat, 2e-2},
      {"h0", torch::randn({N, c.H, c.K, c.V}), torch::kFloat, c.states ? 5e-3 : 0.0}};
  const torch::Tensor cu = c.cu_seqlens.empty() ? torch::Tensor() : torch::tensor(c.cu_seqlens);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.K));
  const bool states = c.states;
  ExpectGpuMatchesReference(inputs,
                            [&](const std::vector<torch::Tensor>& x) {
                              const GlaOutput out =
                                  ChunkSimpleGla(x[0], x[1], x[2], x[3], {}, scale,
                                                 states ? x[4] : torch::Tensor(), true, cu);
                              return std::vector<torch::Tensor>{out.output, out.final_state};
                            },
                            {"o", "final_state"});
}

INSTANTIATE_TEST_SUITE_P(Shapes, ChunkSimpleGlaCuda, ::testing::ValuesIn(kGatedCases));

TEST(ChunkSimpleGlaCuda, RetentionDecayMatchesTheReference) {
  FLAME_SKIP_WITHOUT_GPU();
  torch::manual_seed(9);
  const int64_t B = 2, T = 130, H = 4, K = 64, V = 64;
  torch::Tensor gamma = torch::empty({H});
  for (int64_t h = 0; h < H; ++h) gamma[h] = std::log(1.0 - std::exp2(-5.0 - h));
  std::vector<Input> inputs = {Bf16Input("q", torch::randn({B, T, H, K})),
                               Bf16Input("k", torch::randn({B, T, H, K})),
                               Bf16Input("v", torch::randn({B, T, H, V}))};
  ExpectGpuMatchesReference(
      inputs,
      [&](const std::vector<torch::Tensor>& x) {
        const torch::Tensor g_gamma = gamma.to(
            x[0].device(), x[0].scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat);
        return std::vector<torch::Tensor>{
            ChunkSimpleGla(x[0], x[1], x[2], {}, g_gamma, 0.125).output};
      },
      {"o"});
}

// ---- layer ops -------------------------------------------------------------------------------

TEST(RmsNormCuda, ResidualWeightAndGateMatchTheReference) {
  FLAME_SKIP_WITHOUT_GPU();
  torch::manual_seed(10);
  std::vector<Input> inputs = {Bf16Input("x", torch::randn({3, 50, 256})),
                               Bf16Input("residual", torch::randn({3, 50, 256})),
                               {"weight", torch::rand({256}) + 0.5, torch::kFloat},
                               Bf16Input("gate", torch::randn({3, 50, 256}))};
  ExpectGpuMatchesReference(inputs,
                            [](const std::vector<torch::Tensor>& x) {
                              const RmsNormOutput out = RmsNorm(x[0], x[1], x[2], x[3], 1e-6);
                              return std::vector<torch::Tensor>{out.y, out.residual_out};
                            },
                            {"y", "residual_out"});
}

TEST(RmsNormCuda, PlainNormMatchesTheReference) {
  FLAME_SKIP_WITHOUT_GPU();
  torch::manual_seed(11);
  std::vector<Input> inputs = {Bf16Input("x", torch::randn({77, 1024})),
                               Bf16Input("weight", torch::rand({1024}) + 0.5)};
  ExpectGpuMatchesReference(
      inputs,
      [](const std::vector<torch::Tensor>& x) {
        return std::vector<torch::Tensor>{RmsNorm(x[0], {}, x[1], {}, 1e-5).y};
      },
      {"y"});
}

TEST(CrossEntropyCuda, LossAndGradientMatchTheReference) {
  FLAME_SKIP_WITHOUT_GPU();
  torch::manual_seed(12);
  const int64_t N = 96, V = 1000;
  torch::Tensor labels = torch::randint(0, V, {N}, torch::kLong);
  labels.narrow(0, 0, 7).fill_(kIgnoreIndex);
  std::vector<Input> inputs = {Bf16Input("logits", 3 * torch::randn({N, V}))};
  ExpectGpuMatchesReference(
      inputs,
      [&](const std::vector<torch::Tensor>& x) {
        return std::vector<torch::Tensor>{CrossEntropy(x[0], labels.to(x[0].device()))};
      },
      {"loss"});
}

TEST(LinearCrossEntropyCuda, LossAndGradientsMatchTheReference) {
  FLAME_SKIP_WITHOUT_GPU();
  torch::manual_seed(13);
  const int64_t N = 200, D = 64, V = 512;
  torch::Tensor labels = torch::randint(0, V, {N}, torch::kLong);
  labels.narrow(0, 10, 5).fill_(kIgnoreIndex);
  std::vector<Input> inputs = {Bf16Input("hidden", torch::randn({N, D})),
                               {"weight", 0.1 * torch::randn({V, D}), torch::kFloat}};
  inputs[1].value = inputs[1].value.to(torch::kBFloat16).to(torch::kFloat);
  ExpectGpuMatchesReference(
      inputs,
      [&](const std::vector<torch::Tensor>& x) {
        return std::vector<torch::Tensor>{LinearCrossEntropy(x[0], x[1], labels)};
      },
      {"loss"});
}

TEST(ShortConvCuda, VarlenWithBiasMatchesTheReference) {
  FLAME_SKIP_WITHOUT_GPU();
  torch::manual_seed(14);
  const torch::Tensor cu = torch::tensor(std::vector<int64_t>{0, 3, 40, 41, 90});
  std::vector<Input> inputs = {Bf16Input("x", torch::randn({1, 90, 64})),
                               Bf16Input("weight", 0.5 * torch::randn({64, 1, 4})),
                               Bf16Input("bias", torch::randn({64}))};
  ExpectGpuMatchesReference(
      inputs,
      [&](const std::vector<torch::Tensor>& x) {
        return std::vector<torch::Tensor>{ShortConv(x[0], x[1], x[2], true, cu)};
      },
      {"y"});
}

TEST(ShortConvCuda, DenseWithoutSiluMatchesTheReference) {
  FLAME_SKIP_WITHOUT_GPU();
  torch::manual_seed(15);
  std::vector<Input> inputs = {Bf16Input("x", torch::randn({3, 33, 128})),
                               Bf16Input("weight", 0.5 * torch::randn({128, 3}))};
  ExpectGpuMatchesReference(inputs,
                            [&](const std::vector<torch::Tensor>& x) {
                              return std::vector<torch::Tensor>{ShortConv(x[0], x[1], {}, false)};
                            },
                            {"y"});
}

TEST(L2NormCuda, MatchesTheReference) {
  FLAME_SKIP_WITHOUT_GPU();
  torch::manual_seed(16);
  std::vector<Input> inputs = {Bf16Input("x", torch::randn({2, 70, 4, 128}))};
  ExpectGpuMatchesReference(
      inputs,
      [](const std::vector<torch::Tensor>& x) { return std::vector<torch::Tensor>{L2Norm(x[0])}; },
      {"y"});
}

TEST(RotaryCuda, VarlenPartialRotationMatchesTheReference) {
  FLAME_SKIP_WITHOUT_GPU();
  torch::manual_seed(17);
  const torch::Tensor cu = torch::tensor(std::vector<int64_t>{0, 5, 64, 99});
  std::vector<Input> inputs = {Bf16Input("x", torch::randn({1, 99, 3, 128}))};
  RotaryOptions options;
  options.rotary_dim = 64;
  ExpectGpuMatchesReference(inputs,
                            [&](const std::vector<torch::Tensor>& x) {
                              return std::vector<torch::Tensor>{Rotary(x[0], options, cu)};
                            },
                            {"y"});
}

TEST(RotaryCuda, DenseWithOffsetMatchesTheReference) {
  FLAME_SKIP_WITHOUT_GPU();
  torch::manual_seed(18);
  std::vector<Input> inputs = {Bf16Input("x", torch::randn({2, 40, 2, 64}))};
  RotaryOptions options;
  options.position_offset = 7;
  options.base = 500000.0;
  ExpectGpuMatchesReference(inputs,
                            [&](const std::vector<torch::Tensor>& x) {
                              return std::vector<torch::Tensor>{Rotary(x[0], options)};
                            },
                            {"y"});
}

TEST(SwiGluCuda, MatchesTheReference) {
  FLAME_SKIP_WITHOUT_GPU();
  torch::manual_seed(19);
  std::vector<Input> inputs = {Bf16Input("gate", torch::randn({5, 31, 264})),
                               Bf16Input("up", torch::randn({5, 31, 264}))};
  ExpectGpuMatchesReference(inputs,
                            [](const std::vector<torch::Tensor>& x) {
                              return std::vector<torch::Tensor>{SwiGlu(x[0], x[1])};
                            },
                            {"y"});
}

// A shape the kernel cannot take runs the reference on the GPU instead of failing.
TEST(ChunkGlaCuda, FallsBackToTheReferenceForOddHeadDims) {
  FLAME_SKIP_WITHOUT_GPU();
  torch::manual_seed(20);
  std::vector<Input> inputs = {Bf16Input("q", torch::randn({1, 70, 2, 48})),
                               Bf16Input("k", torch::randn({1, 70, 2, 48})),
                               Bf16Input("v", torch::randn({1, 70, 2, 40})),
                               {"g", Gate({1, 70, 2, 48}, 1.0), torch::kFloat, 2e-2}};
  ExpectGpuMatchesReference(
      inputs,
      [](const std::vector<torch::Tensor>& x) {
        return std::vector<torch::Tensor>{ChunkGla(x[0], x[1], x[2], x[3], 0.25).output};
      },
      {"o"});
}

}  // namespace
}  // namespace flame::worker::ops
