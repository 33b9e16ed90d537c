// The ops' CUDA paths against their CPU references (issue 3's bar): each op runs once on the GPU
// through its entry point (bf16 kernels) and once on the CPU in float64 (the ATen reference) on the
// same bf16-representable inputs; outputs and the gradients of every input must agree to a
// relative RMS error of 5e-3, 2e-2 for gate gradients. Skips where no GPU is visible; compiled in
// FLAME_CUDA builds only (tests/worker/CMakeLists.txt, tests/worker/ops_cuda/ on a GPU host).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "worker/ops/gla.h"
#include "worker/ops/layer_ops.h"
#include "worker/ops/simple_gla.h"

namespace flame::worker::ops {
namespace {

#define FLAME_SKIP_WITHOUT_GPU() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

// Relative RMS error ||a - b|| / ||b|| in float64, naming the worst element on failure.
void ExpectClose(const torch::Tensor& actual, const torch::Tensor& expected, double tolerance,
                 const std::string& what) {
  ASSERT_TRUE(actual.defined()) << what << " is undefined";
  ASSERT_EQ(actual.sizes(), expected.sizes()) << what;
  const torch::Tensor a = actual.detach().to(torch::kCPU, torch::kDouble);
  const torch::Tensor b = expected.detach().to(torch::kCPU, torch::kDouble);
  EXPECT_TRUE(torch::isfinite(a).all().item<bool>()) << what << " has NaN or Inf";
  const torch::Tensor diff = (a - b).abs();
  const double error = diff.norm().item<double>() / (b.norm().item<double>() + 1e-30);
  const int64_t worst = diff.flatten().argmax().item<int64_t>();
  EXPECT_LE(error, tolerance) << what << ": relative RMS error " << error << ", worst element "
                              << worst << " is " << a.flatten()[worst].item<double>() << " vs "
                              << b.flatten()[worst].item<double>();
}

// One input of an op: its value (float32 on the CPU), the dtype the GPU run gets it in, and the
// tolerance of its gradient (0: not differentiable).
struct Input {
  std::string name;
  torch::Tensor value;
  torch::ScalarType gpu_type = torch::kBFloat16;
  double grad_tolerance = 5e-3;
};

Input Bf16Input(const std::string& name, torch::Tensor value, double grad_tolerance = 5e-3) {
  // Rounded to bf16 once, so that both runs see the same numbers.
  return {name, value.to(torch::kBFloat16).to(torch::kFloat), torch::kBFloat16, grad_tolerance};
}

using Op = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;

// Runs `op` on the GPU (inputs in their gpu_type) and on the CPU (float64), backpropagates the
// same random weighting of the outputs through both, and compares outputs and gradients.
void ExpectGpuMatchesReference(const std::vector<Input>& inputs, const Op& op,
                               const std::vector<std::string>& output_names,
                               double output_tolerance = 5e-3) {
  std::vector<torch::Tensor> gpu, cpu;
  for (const Input& in : inputs) {
    const bool grad = in.grad_tolerance > 0;
    gpu.push_back(in.value.to(torch::kCUDA, in.gpu_type).detach().requires_grad_(grad));
    cpu.push_back(in.value.to(torch::kDouble).detach().requires_grad_(grad));
  }
  const std::vector<torch::Tensor> gpu_out = op(gpu), cpu_out = op(cpu);
  ASSERT_EQ(gpu_out.size(), output_names.size());
  ASSERT_EQ(cpu_out.size(), output_names.size());
  torch::manual_seed(1234);
  torch::Tensor gpu_loss = torch::zeros({}, torch::dtype(torch::kDouble).device(torch::kCUDA));
  torch::Tensor cpu_loss = torch::zeros({}, torch::kDouble);
  for (size_t i = 0; i < gpu_out.size(); ++i) {
    ExpectClose(gpu_out[i], cpu_out[i], output_tolerance, output_names[i]);
    const torch::Tensor w = torch::randn(cpu_out[i].sizes(), torch::kDouble);
    gpu_loss = gpu_loss + (gpu_out[i].to(torch::kDouble) * w.to(torch::kCUDA)).sum();
    cpu_loss = cpu_loss + (cpu_out[i] * w).sum();
  }
  gpu_loss.backward();
  cpu_loss.backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].grad_tolerance <= 0) continue;
    ExpectClose(gpu[i].grad(), cpu[i].grad(), inputs[i].grad_tolerance, "d" + inputs[i].name);
  }
}

// fla's gates: logsigmoid(N(0, 1)) / normalizer (small normalizer = strong decay).
torch::Tensor Gate(torch::IntArrayRef sizes, double normalizer) {
  return torch::log_sigmoid(torch::randn(sizes)) / normalizer;
}

// ---- chunk_gla / chunk_simple_gla ---------------------------------------------------------

struct GatedCase {
  int64_t B, T, H, K, V;
  std::vector<int64_t> cu_seqlens;  // non-empty: packed, B == 1
  double normalizer;
  bool states;
};

void PrintTo(const GatedCase& c, std::ostream* out) {
  *out << "B" << c.B << "_T" << c.T << "_H" << c.H << "_K" << c.K << "_V" << c.V
       << (c.cu_seqlens.empty() ? "" : "_varlen") << "_gate" << c.normalizer
       << (c.states ? "_states" : "");
}

const std::vector<GatedCase> kGatedCases = {
    {2, 100, 2, 64, 64, {}, 1.0, true},                   // T not a multiple of 64
    {1, 171, 2, 128, 64, {0, 37, 100, 171}, 0.05, true},  // varlen, odd lengths, strong decay
    {1, 128, 1, 256, 128, {}, 10.0, false},               // weak decay, K = 256
};

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
