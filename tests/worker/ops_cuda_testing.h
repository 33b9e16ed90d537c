// The harness of the ops' CUDA tests (ops_cuda_test.cc, delta_rule_cuda_test.cc): each op runs
// once on the GPU through its entry point (bf16 kernels) and once on the CPU in float64 (the ATen
// reference) on the same bf16-representable inputs, and outputs and the gradients of every input
// are compared by relative RMS error with per-tensor tolerances. Tests skip where no GPU is
// visible; they are compiled in FLAME_CUDA builds only.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <ostream>
#include <string>
#include <vector>

// In a test body: skips the test where no CUDA device is visible.
#define FLAME_SKIP_WITHOUT_GPU() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device"

namespace flame::worker::ops {

// Relative RMS error ||a - b|| / ||b|| in float64, naming the worst element on failure.
inline void ExpectClose(const torch::Tensor& actual, const torch::Tensor& expected,
                        double tolerance, const std::string& what) {
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

inline Input Bf16Input(const std::string& name, torch::Tensor value, double grad_tolerance = 5e-3) {
  // Rounded to bf16 once, so that both runs see the same numbers.
  return {name, value.to(torch::kBFloat16).to(torch::kFloat), torch::kBFloat16, grad_tolerance};
}

using Op = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;

// Runs `op` on the GPU (inputs in their gpu_type) and on the CPU (float64), backpropagates the
// same random weighting of the outputs through both, and compares outputs and gradients.
inline void ExpectGpuMatchesReference(const std::vector<Input>& inputs, const Op& op,
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
inline torch::Tensor Gate(torch::IntArrayRef sizes, double normalizer) {
  return torch::log_sigmoid(torch::randn(sizes)) / normalizer;
}

// The shapes the chunk ops (GLA, simple GLA, the delta rules) are tested on.
struct GatedCase {
  int64_t B, T, H, K, V;
  std::vector<int64_t> cu_seqlens;  // non-empty: packed, B == 1
  double normalizer;
  bool states;
};

inline void PrintTo(const GatedCase& c, std::ostream* out) {
  *out << "B" << c.B << "_T" << c.T << "_H" << c.H << "_K" << c.K << "_V" << c.V
       << (c.cu_seqlens.empty() ? "" : "_varlen") << "_gate" << c.normalizer
       << (c.states ? "_states" : "");
}

inline const std::vector<GatedCase> kGatedCases = {
    {2, 100, 2, 64, 64, {}, 1.0, true},                   // T not a multiple of 64
    {1, 171, 2, 128, 64, {0, 37, 100, 171}, 0.05, true},  // varlen, odd lengths, strong decay
    {1, 128, 1, 256, 128, {}, 10.0, false},               // weak decay, K = 256
};

}  // namespace flame::worker::ops
